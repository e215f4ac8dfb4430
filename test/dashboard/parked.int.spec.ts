import { Injectable, INestApplication, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import Redis from 'ioredis';
import {
  EventrailAdmin,
  EventrailDashboardModule,
  EventrailDashboardOptions,
  EventrailMessage,
  EventrailModule,
  EventrailPublisher,
  OnEvent,
  PublishResult,
} from '../../lib';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

// Response bodies are checked field by field below.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const body = (response: Response): Promise<any> => response.json();
const TOKEN = 's3cret-token-for-parked-tests';
const ALLOWED = 'https://ops.example.com';

/** Keys in `down` fail; every success is recorded as `<key><n>`. */
const dependency = { down: new Set<string>(), handled: [] as string[] };

/** Parked heads wait ten minutes for their next tier: only a retry or give-up through the API moves them within a test. */
@Injectable()
class Payments {
  @OnEvent('account.changed', {
    group: 'payments',
    ordering: 'key',
    maxRetries: 1,
    retryBackoffMs: 5,
    retryBackoffMaxMs: 10,
    redelivery: { delayMs: 600_000, maxDelayMs: 600_000, maxAgeMs: 3_600_000 },
  })
  handle(message: EventrailMessage<{ key: string; n: number }>): void {
    if (dependency.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    dependency.handled.push(`${message.data.key}${message.data.n}`);
  }
}

async function startApp(
  platform: 'express' | 'fastify',
  prefix: string,
  dashboard: EventrailDashboardOptions,
  providers = [Payments],
): Promise<{ app: INestApplication; url: string }> {
  @Module({
    imports: [EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: 1 }), EventrailDashboardModule.register(dashboard)],
    providers,
  })
  class AppModule {}
  const app =
    platform === 'fastify'
      ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false })
      : await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  return { app, url: `http://127.0.0.1:${address.port}/eventrail/api` };
}

describe.each(['express', 'fastify'] as const)('Dashboard API: parked keys on %s', (platform) => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplication;
  let base: string;
  let admin: EventrailAdmin;
  let published: PublishResult[];
  const call = (path: string, init: RequestInit = {}): Promise<Response> =>
    fetch(`${base}${path}`, { ...init, headers: { authorization: `Bearer ${TOKEN}`, ...(init.headers as Record<string, string>) } });
  const post = (path: string, payload: unknown): Promise<Response> =>
    call(path, { method: 'POST', body: JSON.stringify(payload), headers: { 'content-type': 'application/json' } });
  const handledOf = (key: string): string[] => dependency.handled.filter((name) => name.startsWith(key));
  const parkedKeys = async (): Promise<string[]> => (await admin.parkedKeys('payments')).map((p) => p.key);

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(async () => {
    prefix = uniquePrefix('dash-parked');
    dependency.down = new Set(['A', 'B']);
    dependency.handled = [];
    ({ app, url: base } = await startApp(platform, prefix, { auth: { token: TOKEN }, cors: { origins: [ALLOWED] } }));
    admin = app.get(EventrailAdmin);
    published = await app
      .get(EventrailPublisher)
      .publishMany(
        ['A1', 'A2', 'B1', 'C1'].map((name) => ({ event: 'account.changed', data: { key: name[0], n: Number(name[1]) }, key: name[0] })),
      );
    // Past their one quick tier too (5 ms after parking): from then on only the API moves them.
    await waitFor(async () => {
      const parked = await admin.parkedKeys('payments');
      return parked.map((p) => p.key).join() === 'A,B' && parked.every((p) => p.attempts === 2) && handledOf('C').length === 1;
    }, 'A and B parked past their quick tier, C handled');
  });
  afterEach(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('lists parked keys as the admin service reads them; an unknown group is a 404', async () => {
    const listed = await call('/groups/payments/parked');
    expect(listed.status).toBe(200);
    const parked = await body(listed);
    expect(parked).toEqual(JSON.parse(JSON.stringify(await admin.parkedKeys('payments'))));
    expect(parked.map((p: { key: string; offset: string; count: number; error: string }) => [p.key, p.offset, p.count, p.error])).toEqual([
      ['A', published[0].offset, 2, 'Error: A is down'],
      ['B', published[2].offset, 1, 'Error: B is down'],
    ]);
    const unknown = await call('/groups/nope/parked');
    expect(unknown.status).toBe(404);
    expect((await body(unknown)).message).toMatch(/nope/);
    expect((await call('/groups/payments/parked', { headers: { authorization: 'Bearer wrong-token-here' } })).status).toBe(401);

    // A listed origin may send the writes: their preflights pass.
    for (const path of ['/groups/payments/parked', '/groups/payments/parked/retry', '/groups/payments/parked/give-up']) {
      const preflight = await fetch(`${base}${path}`, {
        method: 'OPTIONS',
        headers: {
          origin: ALLOWED,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization,content-type',
        },
      });
      expect([preflight.status, preflight.headers.get('access-control-allow-origin')]).toEqual([204, ALLOWED]);
    }
  });

  it('retries one key or all of them now; a key that is not parked is a 404; a bad body is a 400', async () => {
    dependency.down.delete('B');
    const one = await post('/groups/payments/parked/retry', { key: 'B' });
    expect([one.status, await body(one)]).toEqual([200, { partitions: 1 }]);
    // Ten minutes before its next tier: handled now only because of the retry.
    await waitFor(() => handledOf('B').length === 1, 'B1 handled after the retry');
    await waitFor(async () => (await parkedKeys()).join() === 'A', "only A's line left");

    const missing = await post('/groups/payments/parked/retry', { key: 'B' });
    expect(missing.status).toBe(404);
    expect((await body(missing)).message).toBe('No parked line of key "B" in group "payments" (released, given up, or never parked)');
    for (const bad of [{ key: 7 }, { all: true }, []]) {
      const refused = await post('/groups/payments/parked/retry', bad);
      expect([refused.status, (await body(refused)).error]).toEqual([400, 'InvalidOptionError']);
    }
    // Express's JSON parser refuses a body that is not an object or array itself; Fastify's passes it on.
    for (const bad of [null, 'B']) expect((await post('/groups/payments/parked/retry', bad)).status).toBe(400);
    const form = await call('/groups/payments/parked/retry', { method: 'POST', body: 'key=A' });
    expect(form.status).toBe(415);
    expect(await parkedKeys()).toEqual(['A']);

    dependency.down.clear();
    const all = await post('/groups/payments/parked/retry', {});
    expect([all.status, await body(all)]).toEqual([200, { partitions: 1 }]);
    await waitFor(() => handledOf('A').length === 2, 'A1 and A2 handled after the retry');
    expect(handledOf('A')).toEqual(['A1', 'A2']);
    await waitFor(async () => (await parkedKeys()).length === 0, 'nothing parked');
    const nothing = await post('/groups/payments/parked/retry', {});
    expect([nothing.status, await body(nothing)]).toEqual([200, { partitions: 0 }]);
  });

  it("gives a key's head up: dead-lettered, the key's next message goes; the key is required", async () => {
    dependency.down.delete('A');
    for (const bad of [{}, { key: null }, { key: 'A', all: true }]) {
      const refused = await post('/groups/payments/parked/give-up', bad);
      expect([refused.status, (await body(refused)).error]).toEqual([400, 'InvalidOptionError']);
    }
    expect(await admin.deadLetterCount('payments')).toBe(0);

    const given = await post('/groups/payments/parked/give-up', { key: 'A' });
    expect([given.status, await body(given)]).toEqual([200, { partitions: 1 }]);
    await waitFor(() => handledOf('A').length === 1, 'A2 handled after the give-up');
    expect(handledOf('A')).toEqual(['A2']);
    const [letter] = await admin.deadLetters('payments');
    expect(letter).toMatchObject({ eventId: published[0].id, reason: 'retries-exhausted' });
    expect(letter.error.message).toMatch(/given up by an operator.*A is down/);
    await waitFor(async () => (await parkedKeys()).join() === 'B', "only B's line left");

    const again = await post('/groups/payments/parked/give-up', { key: 'A' });
    expect(again.status).toBe(404);
    expect((await post('/groups/nope/parked/give-up', { key: 'A' })).status).toBe(404);
  });

  it('read-only: lists parked keys, refuses retry and give-up with 403, and nothing changes', async () => {
    const readOnly = await startApp(platform, prefix, { readOnly: true, auth: { token: TOKEN } }, []);
    try {
      const listed = await fetch(`${readOnly.url}/groups/payments/parked`, { headers: { authorization: `Bearer ${TOKEN}` } });
      expect((await body(listed)).map((p: { key: string }) => p.key)).toEqual(['A', 'B']);
      dependency.down.clear();
      for (const [path, payload] of [
        ['retry', {}],
        ['retry', { key: 'A' }],
        ['give-up', { key: 'A' }],
      ] as const) {
        const refused = await fetch(`${readOnly.url}/groups/payments/parked/${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify(payload),
        });
        expect([refused.status, (await body(refused)).message]).toEqual([403, 'The eventrail dashboard is read-only']);
      }
      // A command that got through would be applied before a later one: retry B through the writable app and,
      // once B went, A must still be parked and nothing dead-lettered.
      expect((await post('/groups/payments/parked/retry', { key: 'B' })).status).toBe(200);
      await waitFor(() => handledOf('B').length === 1, 'B1 handled after the retry');
      await waitFor(async () => (await parkedKeys()).join() === 'A', "only A's line left");
      expect(await admin.deadLetterCount('payments')).toBe(0);
      expect(handledOf('A')).toEqual([]);
    } finally {
      await readOnly.app.close();
    }
  });
});
