import { Injectable, INestApplication, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import Redis from 'ioredis';
import {
  DashboardAuthRequiredError,
  EventrailAdmin,
  EventrailDashboardModule,
  EventrailDashboardOptions,
  EventrailMessage,
  EventrailModule,
  EventrailPublisher,
  InvalidOptionError,
  NonRetryableError,
  OnEvent,
} from '../../lib';
import { request as httpRequest } from 'node:http';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { startRedisServer } from '../support/redis-server';
import { EventrailKeys } from '../../lib/redis/keys';

// Response bodies are checked field by field below.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const body = (response: Response): Promise<any> => response.json();
const TOKEN = 's3cret-token-for-tests';
const ALLOWED = 'https://ops.example.com';
let failing = true;
const handled: number[] = [];

@Injectable()
class Billing {
  @OnEvent('order.placed', 'billing')
  bill(message: EventrailMessage<{ n: number }>): void {
    if (failing) throw new NonRetryableError(`order ${message.data.n} refused`);
    handled.push(message.data.n);
  }
}

async function startApp(
  platform: 'express' | 'fastify',
  prefix: string,
  dashboard: EventrailDashboardOptions,
  redis = testRedisUrl(),
): Promise<{ app: INestApplication; url: string }> {
  @Module({
    imports: [EventrailModule.forRoot({ redis, prefix, partitions: 2 }), EventrailDashboardModule.register(dashboard)],
    providers: [Billing],
  })
  class AppModule {}
  const app =
    platform === 'fastify'
      ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false })
      : await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  return { app, url: `http://127.0.0.1:${address.port}` };
}

describe.each(['express', 'fastify'] as const)('Dashboard API on %s', (platform) => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplication;
  let base: string;
  const call = (path: string, init: RequestInit & { token?: string | null } = {}): Promise<Response> => {
    const { token = TOKEN, headers, ...rest } = init;
    return fetch(`${base}/eventrail${path}`, {
      ...rest,
      headers: { ...(token === null ? {} : { authorization: `Bearer ${token}` }), ...(headers as Record<string, string>) },
    });
  };
  const json = (body: unknown): RequestInit => ({
    method: 'POST',
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
  });

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(async () => {
    prefix = uniquePrefix('dash');
    failing = true;
    handled.length = 0;
    ({ app, url: base } = await startApp(platform, prefix, { auth: { token: TOKEN }, cors: { origins: [ALLOWED] } }));
    const publisher = app.get(EventrailPublisher);
    await publisher.publishMany([1, 2, 3].map((n) => ({ event: 'order.placed', data: { n, note: '<b>bold</b>' }, key: `k${n}` })));
    await waitFor(async () => (await app.get(EventrailAdmin).deadLetterCount('billing')) === 3, 'three dead letters');
  });
  afterEach(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('asks for the bearer token: missing and wrong are 401, right is 200; config is public', async () => {
    const missing = await call('/api/groups', { token: null });
    expect(missing.status).toBe(401);
    expect(missing.headers.get('www-authenticate')).toBe('Bearer realm="eventrail"');
    expect((await body(missing)).message).toMatch(/Missing bearer token/);
    const wrong = await call('/api/groups', { token: `${TOKEN}x` });
    expect(wrong.status).toBe(401);
    expect((await body(wrong)).message).toMatch(/Invalid bearer token/);
    expect((await call('/api/groups', { token: 'short' })).status).toBe(401);
    const right = await call('/api/groups');
    expect(right.status).toBe(200);
    const groups = await body(right);
    expect(groups).toEqual([expect.objectContaining({ name: 'billing', events: ['order.placed'], deadLetters: 3 })]);
    const preflightConfig = await call('/api/config', {
      method: 'OPTIONS',
      token: null,
      headers: { origin: ALLOWED, 'access-control-request-method': 'GET' },
    });
    expect([preflightConfig.status, preflightConfig.headers.get('access-control-allow-origin')]).toEqual([204, ALLOWED]);
    const config = await call('/api/config', { token: null });
    expect(await body(config)).toEqual({ authRequired: true, readOnly: false, refreshMs: 2000 });
  });

  it('serves overview, group, dead letters, the log and single entries from the admin service', async () => {
    const overview = await body(await call('/api/overview'));
    expect(overview).toMatchObject({ prefix, partitions: 2, redis: { status: 'ready' }, log: { length: 3, entriesAdded: 3 } });
    expect(overview.redis.usedMemoryBytes).toBeGreaterThan(0);
    expect(overview.groups[0]).toMatchObject({ name: 'billing', deadLetters: 3 });

    // Two partitions dead-letter in parallel: the admin service says which order is newest first.
    const newest = (await app.get(EventrailAdmin).deadLetters('billing', { newestFirst: true })).map((d) => d.id);
    const group = await body(await call('/api/groups/billing'));
    expect(group.recentErrors.map((d: { id: string }) => d.id)).toEqual(newest);
    expect(group.recentErrors[0].error.message).toMatch(/^order \d refused$/);

    const page = await body(await call('/api/groups/billing/dead-letters?count=2'));
    expect(page.total).toBe(3);
    expect(page.items.map((d: { id: string }) => d.id)).toEqual(newest.slice(0, 2));
    const rest = await body(await call(`/api/groups/billing/dead-letters?count=2&after=${page.next}`));
    expect(rest).toMatchObject({ next: null, total: 3 });
    expect(rest.items.map((d: { id: string }) => d.id)).toEqual(newest.slice(2));
    const one = await body(await call(`/api/groups/billing/dead-letters/${rest.items[0].id}`));
    const n = one.data.n as number;
    expect(one).toMatchObject({ data: { n, note: '<b>bold</b>' }, key: `k${n}`, attempts: 1 });

    const partition = one.partition;
    const log = await body(await call(`/api/log?partition=${partition}&event=order.placed,other`));
    expect(log.entries.some((e: { data: { n: number } }) => e.data.n === n)).toBe(true);
    const entry = await body(await call(`/api/log/${partition}/${one.offset}`));
    expect(entry).toMatchObject({ offset: one.offset, event: 'order.placed', data: { n } });
    const filteredOut = await body(await call(`/api/log?partition=${partition}&event=nothing.like.this`));
    expect(filteredOut).toEqual({ partition, entries: [], next: null, scannedTo: log.scannedTo });
  });

  it('answers bad input with 400, unknown groups and entries with 404, naming what was wrong', async () => {
    const cases: Array<[string, number, RegExp]> = [
      ['/api/log?partition=9', 400, /partition/],
      ['/api/log?partition=x', 400, /partition/],
      ['/api/log?from=not-a-time', 400, /from/],
      ['/api/groups/billing/dead-letters?count=0', 400, /count/],
      ['/api/groups/billing/dead-letters?after=zzz', 400, /after/],
      ['/api/groups/billing/dead-letters?after=99999999999999999999-0', 400, /after/],
      ['/api/log?after=99999999999999999999-0', 400, /after/],
      ['/api/log?from=99999999999999999999-0', 400, /from/],
      ['/api/log/0/99999999999999999999-0', 400, /offset/],
      ['/api/groups/billing/dead-letters/99999999999999999999-0', 400, /id/],
      ['/api/groups/nope', 404, /Unknown consumer group "nope"/],
      ['/api/groups/billing/dead-letters/1-0', 404, /No dead letter 1-0/],
      ['/api/log/0/1-0', 404, /No entry 1-0/],
    ];
    for (const [path, status, message] of cases) {
      const response = await call(path);
      expect([path, response.status]).toEqual([path, status]);
      expect((await body(response)).message).toMatch(message);
    }
    const badBody = await call('/api/groups/billing/dead-letters/replay', json({ ids: 'all' }));
    expect(badBody.status).toBe(400);
    expect((await body(badBody)).message).toMatch(/body/);
    const notJson = await call('/api/groups/billing/dead-letters/replay', {
      method: 'POST',
      body: 'all=true',
      headers: { 'content-type': 'text/plain' },
    });
    expect(notJson.status).toBe(415);
    expect(await app.get(EventrailAdmin).deadLetterCount('billing')).toBe(3);
  });

  it('replays one dead letter, then all, and purges', async () => {
    failing = false;
    const [first] = (await body(await call('/api/groups/billing/dead-letters'))).items;
    const replayed = await call('/api/groups/billing/dead-letters/replay', json({ ids: [first.id] }));
    expect(replayed.status).toBe(200);
    expect(await body(replayed)).toEqual({ replayed: 1 });
    await waitFor(() => handled.includes(first.data.n), 'the replayed event handled');
    expect(await app.get(EventrailAdmin).deadLetterCount('billing')).toBe(2);

    failing = true; // they fail again and come back as dead letters
    expect(await body(await call('/api/groups/billing/dead-letters/replay', json({ all: true })))).toEqual({ replayed: 2 });
    await waitFor(async () => (await app.get(EventrailAdmin).deadLetterCount('billing')) === 2, 'dead-lettered again');
    const purged = await call('/api/groups/billing/dead-letters', { method: 'DELETE' });
    expect(await body(purged)).toEqual({ purged: 2 });
    expect(await app.get(EventrailAdmin).deadLetterCount('billing')).toBe(0);
  });

  it('allows CORS for listed origins only', async () => {
    const preflight = (origin: string): Promise<Response> =>
      call('/api/groups/billing/dead-letters/replay', {
        method: 'OPTIONS',
        token: null,
        headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type' },
      });
    const allowed = await preflight(ALLOWED);
    expect(allowed.status).toBe(204);
    expect(allowed.headers.get('access-control-allow-origin')).toBe(ALLOWED);
    expect(allowed.headers.get('access-control-allow-headers')).toMatch(/Authorization/);
    expect(allowed.headers.get('access-control-allow-methods')).toMatch(/POST/);
    const refused = await preflight('https://evil.example.com');
    expect(refused.status).toBe(403);
    expect(refused.headers.get('access-control-allow-origin')).toBeNull();

    const read = await call('/api/groups', { headers: { origin: ALLOWED } });
    expect(read.headers.get('access-control-allow-origin')).toBe(ALLOWED);
    expect(read.headers.get('vary')).toMatch(/Origin/);
    const unauthorized = await call('/api/groups', { token: null, headers: { origin: ALLOWED } });
    expect([unauthorized.status, unauthorized.headers.get('access-control-allow-origin')]).toEqual([401, ALLOWED]);
    const other = await call('/api/groups', { headers: { origin: 'https://evil.example.com' } });
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
    // A write from an unlisted site is refused even when it carries the token (a form needs no preflight).
    failing = false;
    const crossSite = await call('/api/groups/billing/dead-letters/replay', {
      ...json({ all: true }),
      headers: { 'content-type': 'application/json', origin: 'https://evil.example.com' },
    });
    expect(crossSite.status).toBe(403);
    expect(await app.get(EventrailAdmin).deadLetterCount('billing')).toBe(3);
    // X-Forwarded-Host counts only with trustProxy (dashboard-access.spec.ts): without it, naming the
    // origin's host there does not make a write of another site our own.
    const forged = await call('/api/groups/billing/dead-letters/replay', {
      ...json({ all: true }),
      headers: { 'content-type': 'application/json', origin: 'https://ops.internal.example', 'x-forwarded-host': 'ops.internal.example' },
    });
    expect(forged.status).toBe(403);
    expect(await app.get(EventrailAdmin).deadLetterCount('billing')).toBe(3);
  });

  it('serves the UI page with its base path and a strict CSP, and its assets, without the token', async () => {
    const page = await call('', { token: null });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    expect(page.headers.get('content-security-policy')).toMatch(/default-src 'self'/);
    const html = await page.text();
    expect(html).toContain('<base href="/eventrail/"');
    const script = await call('/assets/app.js', { token: null });
    expect([script.status, script.headers.get('content-type')]).toEqual([200, 'text/javascript; charset=utf-8']);
    expect((await call('/assets/..%2Fdashboard.options.ts', { token: null })).status).toBe(404);
    expect((await call('/assets/nope.js', { token: null })).status).toBe(404);
  });
});

describe('Dashboard options', () => {
  let redis: Redis;
  let prefix: string;
  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('dash');
  });
  afterEach(() => deletePrefix(redis, prefix));
  afterAll(() => redis.disconnect());

  it('read-only: every write refused with 403 and nothing changes', async () => {
    failing = true;
    const { app, url } = await startApp('express', prefix, { readOnly: true, auth: false });
    try {
      await app.get(EventrailPublisher).publish('order.placed', { n: 7 });
      await waitFor(async () => (await app.get(EventrailAdmin).deadLetterCount('billing')) === 1, 'one dead letter');
      expect(await body(await fetch(`${url}/eventrail/api/config`))).toEqual({ authRequired: false, readOnly: true, refreshMs: 2000 });
      const headers = { 'content-type': 'application/json' };
      const replay = await fetch(`${url}/eventrail/api/groups/billing/dead-letters/replay`, {
        method: 'POST',
        headers,
        body: '{"all":true}',
      });
      expect(replay.status).toBe(403);
      expect((await body(replay)).message).toBe('The eventrail dashboard is read-only');
      expect((await fetch(`${url}/eventrail/api/groups/billing/dead-letters`, { method: 'DELETE' })).status).toBe(403);
      expect((await fetch(`${url}/eventrail/api/groups/billing/dead-letters`)).status).toBe(200);
      expect(await app.get(EventrailAdmin).deadLetterCount('billing')).toBe(1);
    } finally {
      await app.close();
    }
  });

  it('answers a replay that meets a dead letter edited by hand with 422 InvalidDeadLetterError naming it', async () => {
    const { app, url } = await startApp('express', prefix, { auth: false });
    try {
      await redis.sadd(new EventrailKeys(prefix, 1).groups, 'billing');
      const edited = (await redis.xadd(
        new EventrailKeys(prefix, 1).deadLetters('billing'),
        '*',
        ...['raw', '{not json', 'group', 'billing', 'partition', '0', 'offset', '1-0', 'reason', 'malformed'],
      )) as string;
      const replay = await fetch(`${url}/eventrail/api/groups/billing/dead-letters/replay`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"all":true}',
      });
      expect([replay.status, await body(replay)]).toEqual([
        422,
        {
          statusCode: 422,
          error: 'InvalidDeadLetterError',
          message: expect.stringContaining(
            `Dead letter ${edited} of group "billing" cannot be replayed: its field "raw" is not valid JSON`,
          ),
        },
      ]);
      expect(await app.get(EventrailAdmin).deadLetterCount('billing')).toBe(1);
    } finally {
      await app.close();
    }
  });

  it('with auth: false, answers only requests addressed to a loopback host (no DNS rebinding)', async () => {
    const { app, url } = await startApp('express', prefix, { auth: false });
    const port = new URL(url).port;
    const get = (host: string): Promise<{ status: number; body: string }> =>
      new Promise((resolve, reject) => {
        const req = httpRequest({ host: '127.0.0.1', port, path: '/eventrail/api/groups', headers: { host } }, (res) => {
          let text = '';
          res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        });
        req.on('error', reject).end();
      });
    try {
      for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, 'app.localhost'])
        expect([host, (await get(host)).status]).toEqual([host, 200]);
      const rebound = await get(`attacker.example:${port}`);
      expect(rebound.status).toBe(403);
      expect(JSON.parse(rebound.body).message).toMatch(/no configured auth\.token.*attacker\.example/);
      expect((await get('127.0.0.1.attacker.example')).status).toBe(403);
    } finally {
      await app.close();
    }
  });

  it('answers 503 at once while Redis is down, and recovers with it', async () => {
    let server = await startRedisServer();
    const { app, url } = await startApp('fastify', prefix, { auth: { token: TOKEN } }, server.url);
    const overview = (): Promise<Response> => fetch(`${url}/eventrail/api/overview`, { headers: { authorization: `Bearer ${TOKEN}` } });
    try {
      expect((await overview()).status).toBe(200);
      await server.stop();
      const down = await waitFor(async () => {
        const response = await overview();
        return response.status === 503 ? body(response) : undefined;
      }, '503 from the API');
      expect(down).toMatchObject({ statusCode: 503, error: 'RedisUnavailable', message: expect.stringMatching(/Redis is unavailable/) });
      expect((await fetch(`${url}/eventrail/api/config`)).status).toBe(200); // needs no Redis
      server = await startRedisServer(server.port);
      await waitFor(async () => (await overview()).status === 200, 'the API to recover', 30_000);
    } finally {
      await app.close();
      await server.stop();
    }
  });

  it('answers a replay a full Redis refuses with 503 RedisFullError, naming the operation; reads still answer', async () => {
    const server = await startRedisServer();
    const { app, url } = await startApp('fastify', prefix, { auth: { token: TOKEN } }, server.url);
    const own = new Redis(server.url);
    const api = (path: string, init: RequestInit = {}): Promise<Response> =>
      fetch(`${url}/eventrail${path}`, {
        ...init,
        headers: { authorization: `Bearer ${TOKEN}`, ...(init.headers as Record<string, string>) },
      });
    failing = true;
    try {
      await app.get(EventrailPublisher).publish('order.placed', { n: 9 });
      await waitFor(async () => (await app.get(EventrailAdmin).deadLetterCount('billing')) === 1, 'a dead letter');
      await own.config('SET', 'maxmemory-policy', 'noeviction');
      await own.config('SET', 'maxmemory', '1');
      const refused = await api('/api/groups/billing/dead-letters/replay', {
        method: 'POST',
        body: JSON.stringify({ all: true }),
        headers: { 'content-type': 'application/json' },
      });
      expect([refused.status, await body(refused)]).toEqual([
        503,
        {
          statusCode: 503,
          error: 'RedisFullError',
          message: expect.stringMatching(/^Redis is full .* refused to replay dead letters: OOM/),
        },
      ]);
      expect((await api('/api/overview')).status).toBe(200);
      expect(await app.get(EventrailAdmin).deadLetterCount('billing')).toBe(1);
    } finally {
      await own.config('SET', 'maxmemory', '0').catch(() => undefined);
      own.disconnect();
      await app.close();
      await server.stop();
    }
  });

  it('fails at startup without a token when NODE_ENV=production, and on invalid options', async () => {
    const env = process.env.NODE_ENV;
    process.env.NODE_ENV = 'production';
    try {
      expect(() => EventrailDashboardModule.register({})).toThrow(DashboardAuthRequiredError);
      expect(() => EventrailDashboardModule.register({ auth: { token: TOKEN } })).not.toThrow();
      @Module({
        imports: [
          EventrailModule.forRoot({ redis: testRedisUrl(), prefix }),
          EventrailDashboardModule.registerAsync({ useFactory: () => ({}) }),
        ],
      })
      class AsyncModule {}
      await expect(NestFactory.create(AsyncModule, { logger: false, abortOnError: false })).rejects.toThrow(DashboardAuthRequiredError);
    } finally {
      process.env.NODE_ENV = env;
    }
    expect(() => EventrailDashboardModule.register({ path: 'eventrail' })).toThrow(InvalidOptionError);
    expect(() => EventrailDashboardModule.register({ path: '/a/' })).toThrow(/dashboard.path/);
    expect(() => EventrailDashboardModule.register({ auth: { token: ' ' } })).toThrow(/dashboard.auth/);
    // A secret read from a file with its newline could never be presented; the error does not show it.
    expect(() => EventrailDashboardModule.register({ auth: { token: 'hunter2\n' } })).toThrow(/auth.token: got "<hidden, 8 characters>"/);
    expect(() => EventrailDashboardModule.register({ auth: { token: 'hunter2\n' } })).not.toThrow(/hunter2/);
    expect(() => EventrailDashboardModule.register({ cors: { origins: ['*'] } })).toThrow(/dashboard.cors.origins/);
    expect(() => EventrailDashboardModule.register({ refreshMs: 10 })).toThrow(/dashboard.refreshMs/);
  });
});
