import { INestApplication, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import Redis from 'ioredis';
import {
  EventrailAdmin,
  EventrailDashboardModule,
  EventrailDashboardOptions,
  EventrailModule,
  EventrailPublisher,
  GroupLag,
  LagReport,
  OnEvent,
} from '../../lib';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { startRedisServer } from '../support/redis-server';
import { createRemoteNamespace, netnsUnavailable, RemoteNamespace } from '../dashboard/remote-namespace';

// The scaling endpoint in the dashboard's API: the JSON that KEDA's metrics-api scaler reads with a value
// location, behind the dashboard's access rules.

const TOKEN = 'scaler-token-for-tests';

@Injectable()
class Billing {
  @OnEvent('order.placed', 'billing')
  bill(): void {}
}

/** A GJSON path of the kind KEDA's `valueLocation` takes, as far as these documents need: dot-separated keys. */
function valueAt(document: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((value, key) => (value as Record<string, unknown> | undefined)?.[key], document);
}

type Platform = 'express' | 'fastify';

describe.each(['express', 'fastify'] as const)('the lag endpoint, on %s', (platform: Platform) => {
  let redis: Redis;
  let prefix: string;
  const apps: INestApplication[] = [];

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('lagep');
  });
  afterEach(async () => {
    for (const app of apps.splice(0)) await app.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  async function start(
    dashboard: EventrailDashboardOptions,
    { handlers = false, host = '127.0.0.1', redisUrl = testRedisUrl() } = {},
  ): Promise<string> {
    @Module({
      imports: [EventrailModule.forRoot({ redis: redisUrl, prefix, partitions: 3 }), EventrailDashboardModule.register(dashboard)],
      providers: handlers ? [Billing] : [],
    })
    class AppModule {}
    const app =
      platform === 'fastify'
        ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false })
        : await NestFactory.create(AppModule, { logger: false });
    apps.push(app);
    await app.listen(0, host);
    return `http://${host}:${(app.getHttpServer().address() as { port: number }).port}/eventrail/api`;
  }

  /** Registers group billing with every partition committed, then stops its worker: the group has no worker. */
  async function billingWithoutWorkers(): Promise<EventrailPublisher> {
    await start({ auth: false }, { handlers: true });
    const [app] = apps;
    const admin = app.get(EventrailAdmin);
    for (let p = 0; p < 3; p++) await app.get(EventrailPublisher).publish('order.placed', {}, { partition: p });
    await waitFor(async () => (await admin.group('billing')).partitions.every((s) => s.committed !== null && s.lag === 0), 'caught up');
    await app.close();
    apps.length = 0;
    await start({ auth: false });
    return apps[0].get(EventrailPublisher);
  }

  it("answers a group's exact backlog with no worker running, at the value location a scaler reads", async () => {
    const publisher = await billingWithoutWorkers();
    await publisher.publish('order.placed', {}, { partition: 0 });
    await publisher.publish('order.placed', {}, { partition: 0 });
    await publisher.publish('order.placed', {}, { partition: 2 });
    const url = await start({ auth: { token: TOKEN } });
    const get = (path: string): Promise<Response> => fetch(`${url}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } });

    const one = (await (await get('/lag/billing')).json()) as GroupLag;
    expect(one).toEqual({
      group: 'billing',
      lag: 3,
      lagCapped: false,
      parked: 0,
      parkedOldestAgeMs: 0,
      backlog: 3,
      members: 0,
      partitions: 3,
      usefulWorkers: 2,
      deadLetters: 0,
    });
    expect(valueAt(one, 'backlog')).toBe(3);
    const all = (await (await get('/lag')).json()) as LagReport;
    expect(valueAt(all, 'groups.billing.backlog')).toBe(3);
    expect(Number.isNaN(Date.parse(all.time))).toBe(false);
    expect((await get('/lag/nobody')).status).toBe(404);
  });

  it('answers 503 within its bound while Redis is frozen (SIGSTOP), and 400 to a broken group path', async () => {
    const server = await startRedisServer();
    try {
      const url = await start({ auth: false }, { redisUrl: server.url });
      expect((await fetch(`${url}/lag/%E0`)).status).toBe(400);
      expect((await fetch(`${url}/lag`)).status).toBe(200);
      process.kill(server.pid, 'SIGSTOP');
      const answers: Array<[status: number, ms: number]> = [];
      for (const path of ['/lag/billing', '/lag', '/lag/billing']) {
        const started = performance.now();
        const response = await fetch(`${url}${path}`, { signal: AbortSignal.timeout(15_000) });
        answers.push([response.status, Math.round(performance.now() - started)]);
      }
      console.log(`${platform}, Redis frozen: ${answers.map(([status, ms]) => `${status} in ${ms} ms`).join(', ')}`);
      expect(answers.map(([status]) => status)).toEqual([503, 503, 503]);
      expect(answers[0][1]).toBeLessThan(5000 + 2000);
      expect(answers[1][1]).toBeLessThan(1000);
    } finally {
      process.kill(server.pid, 'SIGCONT');
      for (const app of apps.splice(0)) await app.close();
      await server.stop();
    }
  }, 30_000);

  it('needs the configured token, and with only a generated one answers this machine alone', async () => {
    await billingWithoutWorkers();
    const url = await start({ auth: { token: TOKEN } });
    expect((await fetch(`${url}/lag/billing`)).status).toBe(401);
    expect((await fetch(`${url}/lag`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    expect((await fetch(`${url}/lag`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
    // A generated token: still required here; the check of the caller's machine is below.
    const generated = await start({});
    expect((await fetch(`${generated}/lag`)).status).toBe(401);
  });

  const unavailable = netnsUnavailable();
  (unavailable ? describe.skip : describe)('from another machine', () => {
    let remote: RemoteNamespace;
    beforeAll(() => {
      remote = createRemoteNamespace();
    });
    afterAll(() => remote?.remove());

    it('is refused without a configured token, and answered with it', async () => {
      await billingWithoutWorkers();
      const open = await start({ auth: false }, { host: remote.hostAddress });
      const refused = await remote.curl(`${open}/lag/billing`, ['-H', 'Host: localhost']);
      expect(refused.status).toBe(403);
      expect(refused.body).not.toMatch(/backlog/);
      const guarded = await start({ auth: { token: TOKEN } }, { host: remote.hostAddress });
      expect((await remote.curl(`${guarded}/lag/billing`)).status).toBe(401);
      const answer = await remote.curl(`${guarded}/lag/billing`, ['-H', `Authorization: Bearer ${TOKEN}`]);
      expect([answer.status, (JSON.parse(answer.body) as GroupLag).backlog]).toEqual([200, 0]);
    });
  });
});
