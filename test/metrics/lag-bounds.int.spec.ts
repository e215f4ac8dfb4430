import { INestApplicationContext, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { register, Registry } from 'prom-client';
import { EventrailAdmin, EventrailModule, EventrailPublisher, OnEvent, UnknownGroupError } from '../../lib';
import {
  EventrailLagMetricsModule,
  LagMetricsClashError,
  LagReadTimeoutError,
  registerLagMetrics,
  type LagMetrics,
} from '../../lib/prometheus';
import { GroupLagReader } from '../../lib/metrics/group-lag.reader';
import { createApp } from '../support/app';
import { startRedisServer, type RedisServer } from '../support/redis-server';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { parseExposition, valueOf } from './exposition';

// What the lag gauges do when Redis stops answering, when an app is closed and started again in one
// process, when two registrations share a registry, and when a group goes away while it is read.

const EVENT = 'lag.bound';

@Injectable()
class Billing {
  @OnEvent(EVENT, 'billing')
  handle(): void {}
}

/** Settles with the outcome of `promise` and how long it took, or 'pending' if it took longer than `ms`. */
async function within<T>(promise: Promise<T>, ms: number): Promise<{ ms: number; value?: T; error?: unknown } | 'pending'> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<'pending'>((resolve) => (timer = setTimeout(() => resolve('pending'), ms)));
  try {
    return await Promise.race([
      promise.then(
        (value) => ({ ms: performance.now() - started, value }),
        (error: unknown) => ({ ms: performance.now() - started, error }),
      ),
      pending,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

describe('lag gauges: bounds, reuse and vanished groups', () => {
  describe('with Redis frozen (SIGSTOP)', () => {
    let server: RedisServer;
    let prefix: string;
    let app: INestApplicationContext;
    const exporters: LagMetrics[] = [];

    beforeEach(async () => {
      server = await startRedisServer();
      prefix = uniquePrefix('lagb');
      const seed = await createApp({ redis: server.url, prefix, partitions: 1 }, [Billing]);
      await seed.get(EventrailPublisher).publish(EVENT, {});
      await waitFor(async () => {
        const billing = await seed.get(EventrailAdmin).group('billing');
        return billing.lag === 0 && billing.partitions[0].committed !== null;
      }, 'billing caught up');
      await seed.close();
      app = await createApp({ redis: server.url, prefix, partitions: 1 });
      for (let i = 0; i < 3; i++) await app.get(EventrailPublisher).publish(EVENT, { i });
    }, 30_000);
    afterEach(async () => {
      process.kill(server.pid, 'SIGCONT');
      for (const exporter of exporters.splice(0)) exporter.stop();
      await app.close();
      await server.stop();
    });

    it('fails a scrape after timeoutMs, refuses the next at once, and sends no second read while the first is unanswered', async () => {
      const reads = jest.spyOn(GroupLagReader.prototype, 'read');
      try {
        const registry = new Registry();
        exporters.push(registerLagMetrics(app.get(EventrailAdmin), { registry, timeoutMs: 300 }));
        expect(valueOf(parseExposition(await registry.metrics()), 'eventrail_group_backlog', { group: 'billing' })).toBe(3);
        reads.mockClear();
        process.kill(server.pid, 'SIGSTOP');

        const first = await within(registry.metrics(), 5000);
        expect(first).not.toBe('pending');
        const { ms, error } = first as { ms: number; error?: unknown };
        expect(error).toBeInstanceOf(LagReadTimeoutError);
        expect((error as LagReadTimeoutError).timeoutMs).toBe(300);
        expect(ms).toBeGreaterThanOrEqual(290);

        const second = await within(registry.metrics(), 5000);
        expect(second).not.toBe('pending');
        expect((second as { error?: unknown }).error).toBeInstanceOf(LagReadTimeoutError);
        expect((second as { error: LagReadTimeoutError }).error.waitingMs).toBeGreaterThanOrEqual(300);
        // At once: well under the 300 ms it would have waited (and no second read, below).
        expect((second as { ms: number }).ms).toBeLessThan(250);
        expect(reads).toHaveBeenCalledTimes(1);

        // Redis answers again: the unanswered read ends, and the next scrape reads afresh.
        process.kill(server.pid, 'SIGCONT');
        await waitFor(
          () =>
            registry.metrics().then(
              (text) => valueOf(parseExposition(text), 'eventrail_group_backlog', { group: 'billing' }) === 3,
              () => false,
            ),
          'a scrape that answers once Redis does',
        );
      } finally {
        reads.mockRestore();
      }
    });

    it('with refreshMs, stops answering from its last read once a read passed timeoutMs', async () => {
      const registry = new Registry();
      exporters.push(registerLagMetrics(app.get(EventrailAdmin), { registry, refreshMs: 50, timeoutMs: 300 }));
      await waitFor(
        async () => valueOf(parseExposition(await registry.metrics()), 'eventrail_group_backlog', { group: 'billing' }) === 3,
        'a scheduled read',
      );
      process.kill(server.pid, 'SIGSTOP');
      const frozenAt = performance.now();
      await waitFor(
        () =>
          registry.metrics().then(
            () => false,
            (error: unknown) => error instanceof LagReadTimeoutError,
          ),
        'a scrape that fails rather than repeat the last read',
      );
      const failedAfter = performance.now() - frozenAt;
      console.log(`refreshMs 50, timeoutMs 300: scrapes fail ${failedAfter.toFixed(0)} ms after Redis froze`);
      expect(failedAfter).toBeLessThan(300 + 50 + 1000);
    });
  });

  describe('on the shared test Redis', () => {
    let redis: Redis;
    let prefix: string;
    const apps: INestApplicationContext[] = [];
    const exporters: LagMetrics[] = [];

    beforeAll(() => (redis = new Redis(testRedisUrl())));
    beforeEach(async () => {
      prefix = uniquePrefix('lagb');
      const seed = await createApp({ prefix, partitions: 2 }, [Billing]);
      await seed.get(EventrailPublisher).publish(EVENT, {}, { partition: 0 });
      await waitFor(async () => {
        const billing = await seed.get(EventrailAdmin).group('billing');
        return billing.lag === 0 && billing.partitions[0].committed !== null;
      }, 'billing caught up');
      await seed.close();
    }, 30_000);
    afterEach(async () => {
      for (const exporter of exporters.splice(0)) exporter.stop();
      for (const app of apps.splice(0)) await app.close();
      await deletePrefix(redis, prefix);
    });
    afterAll(() => redis.disconnect());

    async function exporterApp(): Promise<EventrailAdmin> {
      const app = await createApp({ prefix, partitions: 2 });
      apps.push(app);
      return app.get(EventrailAdmin);
    }

    it('an app closed and another started in one process: the global registry scrapes through the new one', async () => {
      @Module({
        imports: [EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: 2 }), EventrailLagMetricsModule.register()],
      })
      class AppModule {}
      const first = await NestFactory.createApplicationContext(AppModule, { logger: false });
      expect(valueOf(parseExposition(await register.metrics()), 'eventrail_group_backlog', { group: 'billing' })).toBe(0);
      await first.close();
      // Closed: its gauges left the registry with it, rather than reading through its closed connection.
      expect(register.getSingleMetric('eventrail_group_backlog')).toBeUndefined();
      const second = await NestFactory.createApplicationContext(AppModule, { logger: false });
      try {
        expect(valueOf(parseExposition(await register.metrics()), 'eventrail_group_backlog', { group: 'billing' })).toBe(0);
      } finally {
        await second.close();
      }
      expect(register.getSingleMetric('eventrail_group_backlog')).toBeUndefined();
    });

    it('the newest live registration feeds shared gauges, and the last one to stop removes them', async () => {
      const registry = new Registry();
      const closing = await createApp({ prefix, partitions: 2 });
      const older = registerLagMetrics(closing.get(EventrailAdmin), { registry });
      const newer = registerLagMetrics(await exporterApp(), { registry });
      exporters.push(newer);
      await closing.close(); // without stopping its registration: the newer one reads
      expect(valueOf(parseExposition(await registry.metrics()), 'eventrail_group_lag', { group: 'billing' })).toBe(0);
      older.stop();
      newer.stop();
      expect(await registry.getMetricsAsJSON()).toEqual([]);
    });

    it('refuses a second registration on one registry with other groups or timing, naming the clash', async () => {
      const admin = await exporterApp();
      const registry = new Registry();
      exporters.push(registerLagMetrics(admin, { registry, groups: ['nothing-here'] }));
      expect(() => registerLagMetrics(admin, { registry, groups: ['billing'] })).toThrow(LagMetricsClashError);
      expect(() => registerLagMetrics(admin, { registry, groups: ['billing'] })).toThrow(
        /already registered on this registry with groups \["nothing-here"\]; this registration asks for \["billing"\]/,
      );
      expect(() => registerLagMetrics(admin, { registry, groups: ['nothing-here'], refreshMs: 1000 })).toThrow(/refreshMs 0/);
      // The same groups in another order is the same registration, and another prefix is other gauges.
      exporters.push(registerLagMetrics(admin, { registry, groups: ['nothing-here', 'nothing-here'] }));
      exporters.push(registerLagMetrics(admin, { registry, groups: ['billing'], prefix: 'other_' }));
      const samples = parseExposition(await registry.metrics());
      expect(valueOf(samples, 'other_group_backlog', { group: 'billing' })).toBe(0);
    });

    it('refuses a timeoutMs it cannot use, naming it', async () => {
      const admin = await exporterApp();
      expect(() => registerLagMetrics(admin, { timeoutMs: 0 })).toThrow(/lagMetrics\.timeoutMs/);
      expect(() => registerLagMetrics(admin, { timeoutMs: 1.5 })).toThrow(/lagMetrics\.timeoutMs/);
    });

    it('leaves out a name in the registry with nothing behind it (a group deleted while the scrape read it), rather than show the log as its backlog', async () => {
      const writer = await exporterApp();
      const publisher = apps[0].get(EventrailPublisher);
      for (let i = 0; i < 5; i++) await publisher.publish(EVENT, { i }, { partition: 1 });
      // What a delete leaves for a read that listed the group before it: the name, and none of the group's keys.
      await redis.sadd(`${prefix}:groups`, 'ghost');
      const registry = new Registry();
      exporters.push(registerLagMetrics(writer, { registry }));
      const samples = parseExposition(await registry.metrics());
      expect(samples.filter((s) => s.name === 'eventrail_group_backlog')).toEqual([
        { name: 'eventrail_group_backlog', labels: { group: 'billing' }, value: 5 },
      ]);
      const reader = new GroupLagReader(writer);
      expect((await reader.read(['ghost', 'billing'])).map((l) => l.group)).toEqual(['billing']);
      await expect(reader.group('ghost')).rejects.toThrow(UnknownGroupError);
    });
  });
});
