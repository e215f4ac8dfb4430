import { INestApplication, Injectable, Logger, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import Redis from 'ioredis';
import { connect } from 'node:net';
import {
  DashboardAuthDisabledError,
  DashboardAuthRequiredError,
  EventrailAdmin,
  EventrailDashboardLink,
  EventrailDashboardModule,
  EventrailDashboardOptions,
  EventrailModule,
  EventrailPublisher,
  InvalidOptionError,
  NonRetryableError,
  OnEvent,
} from '../../lib';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createRemoteNamespace, netnsUnavailable, RemoteNamespace } from './remote-namespace';

// The hardening of the dashboard's access: who may call the API (this machine, this site, the token) and
// what the page's base is. Every request below that must be refused is also checked to change nothing.

const TOKEN = 'configured-secret-for-tests';
const LISTED = 'https://ops.example.com';
const EVIL = 'https://evil.example';

@Injectable()
class Billing {
  @OnEvent('order.placed', 'billing')
  bill(): void {
    throw new NonRetryableError('declined');
  }
}

interface Started {
  app: INestApplication;
  port: number;
  /** `http://127.0.0.1:<port>` */
  local: string;
  deadLetters(): Promise<number>;
}

type Platform = 'express' | 'fastify';

async function startApp(
  platform: Platform,
  prefix: string,
  dashboard: EventrailDashboardOptions,
  { host = '127.0.0.1', enableCors = false, globalPrefix }: { host?: string; enableCors?: boolean; globalPrefix?: string } = {},
): Promise<Started> {
  @Module({
    imports: [EventrailModule.forRoot({ redis: testRedisUrl(), prefix }), EventrailDashboardModule.register(dashboard)],
    providers: [Billing],
  })
  class AppModule {}
  const app =
    platform === 'fastify'
      ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false })
      : await NestFactory.create(AppModule, { logger: false });
  // The application's own CORS, as permissive as it gets: it must not open the dashboard to other sites.
  if (enableCors) app.enableCors();
  if (globalPrefix) app.setGlobalPrefix(globalPrefix);
  await app.listen(0, host);
  const port = (app.getHttpServer().address() as { port: number }).port;
  const admin = app.get(EventrailAdmin);
  await app.get(EventrailPublisher).publish('order.placed', { secret: 'card-4242' });
  await waitFor(async () => (await admin.deadLetterCount('billing')) === 1, 'one dead letter');
  return { app, port, local: `http://127.0.0.1:${port}`, deadLetters: () => admin.deadLetterCount('billing') };
}

/** The token of the link the app logged at startup, as a developer would copy it. */
function loggedToken(messages: string[]): string {
  const line = messages.find((message) => /Dashboard at http:\/\/\S+#token=/.test(message));
  if (!line) throw new Error(`no dashboard link logged, only: ${messages.join(' | ')}`);
  return /#token=(\S+)/.exec(line)![1];
}

/** One HTTP/1.1 request written by hand, so that the request line can be anything. */
function rawGet(port: number, target: string, host = `127.0.0.1:${port}`): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', reject);
    socket.on('end', () => {
      const [head, ...rest] = text.split('\r\n\r\n');
      resolve({ status: Number(head.split(' ')[1]), body: rest.join('\r\n\r\n') });
    });
    socket.write(`GET ${target} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  });
}

let redis: Redis;
const apps: INestApplication[] = [];
const prefixes: string[] = [];
/** Each app on a log of its own, with one dead letter in it. */
const start = async (
  platform: Platform,
  dashboard: EventrailDashboardOptions,
  options?: Parameters<typeof startApp>[3],
): Promise<Started> => {
  const prefix = uniquePrefix('dacc');
  prefixes.push(prefix);
  const started = await startApp(platform, prefix, dashboard, options);
  apps.push(started.app);
  return started;
};

beforeAll(() => {
  redis = new Redis(testRedisUrl());
});
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
  for (const prefix of prefixes.splice(0)) await deletePrefix(redis, prefix);
  jest.restoreAllMocks();
});
afterAll(() => redis.disconnect());

const unavailable = netnsUnavailable();
if (unavailable) console.warn(`Skipping the other-machine dashboard tests: ${unavailable} (they need root and \`ip netns\`)`);
const withNetns = unavailable ? describe.skip : describe;

withNetns.each(['express', 'fastify'] as const)('a caller on another machine, on %s', (platform) => {
  let remote: RemoteNamespace;
  beforeAll(() => {
    remote = createRemoteNamespace();
  });
  afterAll(() => remote?.remove());

  it('gets no data and changes nothing without a configured token, whatever Host or forwarding headers it sends', async () => {
    const logs = jest.spyOn(Logger.prototype, 'log');
    for (const dashboard of [{}, { auth: false }] as EventrailDashboardOptions[]) {
      const { app, port, local, deadLetters } = await start(platform, dashboard, { host: '0.0.0.0' });
      const token = dashboard.auth === false ? null : loggedToken(logs.mock.calls.map(([message]) => String(message)));
      const bearer = token ? ['-H', `Authorization: Bearer ${token}`] : [];
      // The same request from this machine is answered: the refusals below are about where it comes from.
      const here = await fetch(`${local}/eventrail/api/groups`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
      expect([JSON.stringify(dashboard), here.status]).toEqual([JSON.stringify(dashboard), 200]);

      const url = `http://${remote.hostAddress}:${port}/eventrail/api`;
      const lies = [
        ['-H', `Host: localhost:${port}`],
        ['-H', `Host: 127.0.0.1:${port}`],
        ['-H', 'Host: [::1]'],
        ['-H', `Host: localhost:${port}`, '-H', 'X-Forwarded-For: 127.0.0.1', '-H', `X-Forwarded-Host: localhost:${port}`],
        ['-H', `Host: localhost:${port}`, '-H', 'Forwarded: for=127.0.0.1;host=localhost'],
        ['-H', `Host: localhost:${port}`, '-H', `Origin: http://localhost:${port}`, '-H', 'Sec-Fetch-Site: same-origin'],
      ];
      for (const headers of lies) {
        for (const path of ['/groups', '/groups/billing/dead-letters', '/overview', '/config']) {
          const answer = await remote.curl(`${url}${path}`, [...bearer, ...headers]);
          expect([path, headers.join(' '), answer.status]).toEqual([path, headers.join(' '), 403]);
          expect(answer.body).not.toMatch(/billing|card-4242|authRequired/);
          expect(JSON.parse(answer.body).message).toMatch(/answers only this machine.*10\.200\./);
        }
        const purge = await remote.curl(`${url}/groups/billing/dead-letters`, [...bearer, ...headers, '-X', 'DELETE']);
        const replay = await remote.curl(`${url}/groups/billing/dead-letters/replay`, [
          ...bearer,
          ...headers,
          '-H',
          'Content-Type: application/json',
          '--data',
          '{"all":true}',
        ]);
        expect([purge.status, replay.status]).toEqual([403, 403]);
      }
      expect(await deadLetters()).toBe(1);
      await app.close();
      apps.length = 0;
    }
  });

  it('with a configured token, is answered when it presents it, and only then', async () => {
    const { port, deadLetters } = await start(platform, { auth: { token: TOKEN } }, { host: remote.hostAddress });
    const url = `http://${remote.hostAddress}:${port}/eventrail/api/groups`;
    expect((await remote.curl(url, ['-H', `Host: localhost:${port}`])).status).toBe(401);
    const answer = await remote.curl(url, ['-H', `Authorization: Bearer ${TOKEN}`]);
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toEqual([expect.objectContaining({ name: 'billing', deadLetters: 1 })]);
    expect(await deadLetters()).toBe(1);
  });
});

describe.each(['express', 'fastify'] as const)('dashboard access on %s', (platform) => {
  it('behind a proxy on this machine: forwarded headers refuse without trustProxy, and count only with it', async () => {
    const { local, deadLetters } = await start(platform, { auth: false });
    const get = (headers: Record<string, string>): Promise<Response> => fetch(`${local}/eventrail/api/groups`, { headers });
    expect((await get({})).status).toBe(200);
    // A local proxy passing on a request from elsewhere: the peer is 127.0.0.1, the client is not.
    const forwarded: Array<Record<string, string>> = [
      { 'x-forwarded-for': '203.0.113.7' },
      { forwarded: 'for=203.0.113.7' },
      { 'x-real-ip': '203.0.113.7' },
    ];
    for (const headers of forwarded) {
      expect([headers, (await get(headers)).status]).toEqual([headers, 403]);
    }
    expect(await deadLetters()).toBe(1);
    await apps.pop()!.close();

    const proxied = await start(platform, { auth: false, trustProxy: true });
    const viaProxy = (headers: Record<string, string>): Promise<Response> => fetch(`${proxied.local}/eventrail/api/groups`, { headers });
    expect((await viaProxy({ 'x-forwarded-for': '203.0.113.7' })).status).toBe(403);
    // The proxy appends the client it saw last: a client's own "127.0.0.1" in front does not count.
    expect((await viaProxy({ 'x-forwarded-for': '127.0.0.1, 203.0.113.7' })).status).toBe(403);
    expect((await viaProxy({ forwarded: 'for=127.0.0.1, for="[2001:db8::1]"' })).status).toBe(403);
    expect((await viaProxy({ 'x-forwarded-for': '127.0.0.1', 'x-forwarded-host': 'dashboard.example' })).status).toBe(403);
    expect((await viaProxy({ 'x-forwarded-for': '127.0.0.1', 'x-forwarded-host': 'localhost' })).status).toBe(200);
  });

  it('refuses every cross-site request, whatever CORS the application installed', async () => {
    for (const dashboard of [{ auth: false }, { auth: { token: TOKEN }, cors: { origins: [LISTED] } }] as EventrailDashboardOptions[]) {
      const { app, local, port, deadLetters } = await start(platform, dashboard, { enableCors: true });
      const bearer: Record<string, string> = dashboard.auth ? { authorization: `Bearer ${TOKEN}` } : {};
      const call = (path: string, headers: Record<string, string>, init: RequestInit = {}): Promise<Response> =>
        fetch(`${local}/eventrail/api${path}`, { ...init, headers: { ...bearer, ...headers } });
      const sites: Array<Record<string, string>> = [
        { origin: EVIL },
        { origin: EVIL, 'sec-fetch-site': 'cross-site' },
        { 'sec-fetch-site': 'cross-site' },
        { origin: `http://other.localhost:${port}`, 'sec-fetch-site': 'same-site' },
        { origin: 'null' },
        // A forged X-Forwarded-Host naming the attacker's site does not make it ours.
        { origin: EVIL, 'x-forwarded-host': 'evil.example' },
      ];
      for (const headers of sites) {
        for (const path of ['/groups', '/groups/billing/dead-letters', '/config']) {
          const answer = await call(path, headers);
          const text = await answer.text();
          expect([path, headers, answer.status]).toEqual([path, headers, 403]);
          expect(text).not.toMatch(/billing|card-4242|authRequired/);
          expect(JSON.parse(text).message).toMatch(/answers no other site/);
        }
        const json = { 'content-type': 'application/json' };
        const replay = await call('/groups/billing/dead-letters/replay', { ...headers, ...json }, { method: 'POST', body: '{"all":true}' });
        const purge = await call('/groups/billing/dead-letters', headers, { method: 'DELETE' });
        expect([headers, replay.status, purge.status]).toEqual([headers, 403, 403]);
      }
      expect(await deadLetters()).toBe(1);
      // The dashboard's own page (same origin) and a listed origin are answered.
      const own = await call('/groups', { origin: `http://127.0.0.1:${port}`, 'sec-fetch-site': 'same-origin' });
      expect(own.status).toBe(200);
      if (dashboard.auth) {
        const listed = await call('/groups', { origin: LISTED, 'sec-fetch-site': 'cross-site' });
        expect([listed.status, listed.headers.get('access-control-allow-origin')]).toEqual([200, LISTED]);
      }
      await app.close();
      apps.length = 0;
    }
  });

  it('trusts X-Forwarded-Host for the own-site check only with trustProxy', async () => {
    const write = (started: Started, headers: Record<string, string>): Promise<Response> =>
      fetch(`${started.local}/eventrail/api/groups/billing/dead-letters`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${TOKEN}`, origin: 'https://ops.internal.example', ...headers },
      });
    const direct = await start(platform, { auth: { token: TOKEN } });
    expect((await write(direct, { 'x-forwarded-host': 'ops.internal.example' })).status).toBe(403);
    expect(await direct.deadLetters()).toBe(1);
    await apps.pop()!.close();
    const proxied = await start(platform, { auth: { token: TOKEN }, trustProxy: true });
    const purged = await write(proxied, { 'x-forwarded-host': 'ops.internal.example' });
    expect([purged.status, await purged.json()]).toEqual([200, { purged: 1 }]);
  });

  it('without auth, generates a token and logs the link that carries it in the fragment', async () => {
    const logs = jest.spyOn(Logger.prototype, 'log');
    const { app, local, port, deadLetters } = await start(platform, {}, { globalPrefix: 'ops' });
    const messages = logs.mock.calls.map(([message]) => String(message));
    const token = loggedToken(messages);
    expect(token).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(app.get(EventrailDashboardLink).url).toBe(`http://127.0.0.1:${port}/ops/eventrail#token=${token}`);
    expect(messages).toContain(
      `Dashboard at http://127.0.0.1:${port}/ops/eventrail#token=${token} (token generated at startup; set auth.token to choose one)`,
    );
    const api = `${local}/ops/eventrail/api`;
    expect(await (await fetch(`${api}/config`)).json()).toEqual({ authRequired: true, readOnly: false, refreshMs: 2000 });
    expect((await fetch(`${api}/groups`)).status).toBe(401);
    expect((await fetch(`${api}/groups/billing/dead-letters`, { method: 'DELETE' })).status).toBe(401);
    expect(await deadLetters()).toBe(1);
    const groups = await fetch(`${api}/groups`, { headers: { authorization: `Bearer ${token}` } });
    expect([groups.status, ((await groups.json()) as Array<{ name: string }>)[0].name]).toEqual([200, 'billing']);
    // Each registration has its own token.
    const other = await start(platform, {});
    expect(other.app.get(EventrailDashboardLink).url).not.toContain(token);
  });

  it('auth: false answers this machine with a warning, and is refused in production', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    const { local, app, port } = await start(platform, { auth: false });
    expect(warn.mock.calls.map(([message]) => String(message))).toContainEqual(expect.stringMatching(/auth: false.*needs no token/));
    expect(app.get(EventrailDashboardLink).url).not.toContain('#token');
    expect(await (await fetch(`${local}/eventrail/api/config`)).json()).toEqual({ authRequired: false, readOnly: false, refreshMs: 2000 });
    expect((await fetch(`${local}/eventrail/api/groups`)).status).toBe(200);
    // A page that rebinds its own name to 127.0.0.1 is on this machine's loopback, but not addressed to localhost.
    const rebound = await rawGet(port, '/eventrail/api/groups', 'attacker.example');
    expect(rebound.status).toBe(403);
    expect(JSON.parse(rebound.body).message).toMatch(/addressed to attacker\.example/);
  });

  it('builds the page base from the configured route, never from the request line', async () => {
    const { port } = await start(platform, { auth: false });
    const targets = [
      "/eventrail#$'",
      '/eventrail?x=$%27',
      "/eventrail?$'$`$&",
      'http://evil.example/eventrail',
      'http://evil.example:1/eventrail?a=b',
    ];
    for (const target of targets) {
      const answer = await rawGet(port, target);
      expect([target, answer.status]).toEqual([target, 200]);
      // One document: a `$'` in a string replacement used to append the rest of the page again.
      expect([target, answer.body.match(/<!doctype html>/gi)?.length, answer.body.match(/<\/html>/gi)?.length]).toEqual([target, 1, 1]);
      expect([target, /<base href="([^"]*)"/.exec(answer.body)?.[1]]).toEqual([target, '/eventrail/']);
    }
  });
});

describe('dashboard auth options', () => {
  const inProduction = (fn: () => unknown): unknown => {
    const env = process.env.NODE_ENV;
    process.env.NODE_ENV = 'production';
    try {
      return fn();
    } finally {
      process.env.NODE_ENV = env;
    }
  };

  it('refuses auth: false and a left-out token in production, with typed errors', () => {
    expect(() => inProduction(() => EventrailDashboardModule.register({ auth: false }))).toThrow(DashboardAuthDisabledError);
    expect(() => inProduction(() => EventrailDashboardModule.register({ auth: false }))).toThrow(/auth: false.*NODE_ENV=production/);
    expect(() => inProduction(() => EventrailDashboardModule.register({}))).toThrow(DashboardAuthRequiredError);
    expect(() => inProduction(() => EventrailDashboardModule.register({ auth: { token: TOKEN } }))).not.toThrow();
  });

  it('names misspelt and invalid options, without echoing a secret', () => {
    expect(() => EventrailDashboardModule.register({ trustproxy: true } as never)).toThrow(InvalidOptionError);
    expect(() => EventrailDashboardModule.register({ trustproxy: true } as never)).toThrow(/dashboard\.trustproxy/);
    expect(() => EventrailDashboardModule.register({ trustProxy: 'yes' } as never)).toThrow(/dashboard\.trustProxy/);
    expect(() => EventrailDashboardModule.register({ auth: true } as never)).toThrow(/dashboard\.auth/);
    expect(() => EventrailDashboardModule.register({ auth: { token: TOKEN, tokn: 'x' } } as never)).toThrow(/dashboard\.auth\.tokn/);
    expect(() => EventrailDashboardModule.register({ auth: { token: TOKEN, tokn: 'x' } } as never)).not.toThrow(new RegExp(TOKEN));
    expect(() => EventrailDashboardModule.register({ cors: { origins: [], credentials: true } } as never)).toThrow(
      /dashboard\.cors\.credentials/,
    );
  });
});
