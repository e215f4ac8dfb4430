import { INestApplicationContext, Injectable, Logger } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent, PartitionMismatchError } from '../../lib';
import { EventrailHealthIndicator, EventrailHealthModule } from '../../lib/health';
import { LOG_LOST_DOWN_MS } from '../../lib/health/eventrail-health.indicator';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { freePort, RedisServer, startRedisServer } from '../support/redis-server';

/** A server that keeps nothing on disk: killed and started again, it comes back empty. */
const NO_PERSISTENCE = ['--save', '', '--appendonly', 'no'];

const handled = new Set<number>();
/** How many times each event was handled. */
const handlings = new Map<number, number>();
/** The event whose handler is running when Redis restarts, until the gate opens. */
const HELD = 99;
let holding = false;
let openGate: () => void = () => undefined;
let gate = Promise.resolve();

@Injectable()
class Mailer {
  @OnEvent('mail', { group: 'mailer', initialOffset: { mode: 'fromEnd' }, lockTtlMs: 1500, heartbeatTtlMs: 1500 })
  async handle(message: EventrailMessage<{ n: number }>): Promise<void> {
    if (message.data.n === HELD) {
      holding = true;
      await gate;
    }
    handled.add(message.data.n);
    handlings.set(message.data.n, (handlings.get(message.data.n) ?? 0) + 1);
  }
}

/**
 * Redis restarted without persistence under a running group that starts
 * from the end: the log, the offsets, the leases and the log's metadata are
 * gone. The group had committed, so it must not skip what the new log
 * receives, and the loss must be loud.
 */
describe('a Redis that comes back without its data', () => {
  let server: RedisServer;
  let port: number;
  let prefix: string;
  let apps: INestApplicationContext[] = [];
  const lost: number[] = [];

  const start = async (partitions: number, providers: unknown[] = [Mailer]): Promise<INestApplicationContext> => {
    const app = await createApp(
      { redis: server.url, prefix, partitions, metrics: { onLogLost: () => lost.push(Date.now()) } },
      providers as never[],
      [TerminusModule, EventrailHealthModule],
    );
    apps.push(app);
    return app;
  };
  /** Publishes events `from` .. `to` - 1 through the app, each tried again while its connection comes back. */
  const publish = async (app: INestApplicationContext, from: number, to: number): Promise<void> => {
    const publisher = app.get(EventrailPublisher);
    for (let n = from; n < to; n++) {
      await waitFor(() => publisher.publish('mail', { n }, { key: `k${n}` }).then(() => true), `publish ${n}`, 10_000);
    }
  };
  /**
   * Appends events `from` .. `to` - 1 as a producer in another language does (one XADD each, partitions
   * in turn), `paceMs` apart, on a connection of its own: one that keeps publishing from the moment
   * Redis is back, while the workers reconnect, find their leases gone and take the partitions again.
   */
  const produce = async (redis: Redis, keys: EventrailKeys, from: number, to: number, paceMs: number): Promise<void> => {
    for (let n = from; n < to; n++) {
      await redis.xadd(keys.stream(n % keys.partitions), '*', 'event', 'mail', 'data', JSON.stringify({ n }));
      await new Promise((resolve) => setTimeout(resolve, paceMs));
    }
  };
  const missing = (from: number, to: number): number[] =>
    Array.from({ length: to - from }, (_, i) => from + i).filter((n) => !handled.has(n));

  beforeEach(async () => {
    handled.clear();
    handlings.clear();
    lost.length = 0;
    holding = false;
    gate = new Promise((resolve) => (openGate = resolve));
    prefix = uniquePrefix('lost');
    port = await freePort();
    server = await startRedisServer(port, NO_PERSISTENCE);
  });
  afterEach(async () => {
    openGate();
    jest.restoreAllMocks();
    await Promise.all(apps.map((a) => a.close()));
    apps = [];
    await server.stop();
  });

  it('handles every event published after the restart, reports the loss (log, health, metric) and restores the partition guard', async () => {
    const errors = jest.spyOn(Logger.prototype, 'error');
    const app = await start(2);
    const keys = new EventrailKeys(prefix, 2);
    await publish(app, 0, 20);
    await waitFor(
      () => missing(0, 20).length === 0,
      () => `events before the restart, missing ${missing(0, 20).join(', ')}`,
    );

    // A batch is in hand when Redis goes: the worker takes its partition again only after it.
    await publish(app, HELD, HELD + 1);
    await waitFor(() => holding, 'the held handler to start');
    await server.stop('SIGKILL');
    server = await startRedisServer(port, NO_PERSISTENCE);
    const redis = new Redis(server.url);
    try {
      // Nothing of the old log came back (the workers' heartbeats may have written their keys already).
      expect(await redis.xlen(keys.stream(0))).toBe(0);
      await produce(redis, keys, 100, 175, 5);
      openGate();

      await waitFor(
        () => missing(100, 175).length === 0,
        () => `events after the restart, missing ${missing(100, 175).join(', ')}`,
        20_000,
      );

      expect(lost.length).toBeGreaterThanOrEqual(1);
      const logged = errors.mock.calls.map(([message]) => String(message)).filter((m) => m.includes('vanished'));
      expect(logged.length).toBeGreaterThanOrEqual(1);
      expect(logged[0]).toContain(prefix);
      const report = (await app.get(EventrailHealthIndicator).isHealthy()).eventrail as { status: string; message?: string };
      expect(report.status).toBe('down');
      expect(report.message).toMatch(/vanished/);
      // Down for LOG_LOST_DOWN_MS, then up with the loss among the warnings. Up also needs every
      // partition leased by a live member: with lockTtlMs 1500 on a loaded host a renewal can come
      // late and a lease lapse until the worker takes it again, so this waits for it rather than
      // judge one reading (it failed once in CI that way, Node 26).
      type Report = { status: string; message?: string; warnings?: string[] };
      const checkLater = async (): Promise<Report> => {
        const clock = jest.spyOn(Date, 'now').mockReturnValue(Date.now() + LOG_LOST_DOWN_MS + 1000);
        try {
          return (await app.get(EventrailHealthIndicator).isHealthy()).eventrail as Report;
        } finally {
          clock.mockRestore();
        }
      };
      let afterwards: Report = { status: 'unread' };
      await waitFor(
        async () => (afterwards = await checkLater()).status === 'up',
        () => `the check up once LOG_LOST_DOWN_MS passed; last: ${afterwards.status} (${afterwards.message})`,
        10_000,
      );
      expect(afterwards.warnings).toEqual([expect.stringMatching(/vanished/)]);
      expect(await redis.hget(keys.meta, 'partitions')).toBe('2');
      await expect(start(3, [])).rejects.toThrow(PartitionMismatchError);
    } finally {
      redis.disconnect();
    }
  });

  it('reports no loss and starts from the end for a group deleted and joined again, or an app started again on a flushed Redis', async () => {
    const errors = jest.spyOn(Logger.prototype, 'error');
    const keys = new EventrailKeys(prefix, 2);
    const first = await start(2);
    await publish(first, 0, 10);
    await waitFor(() => missing(0, 10).length === 0, 'events of the first app');
    const admin = first.get(EventrailAdmin);
    const taken = async (): Promise<boolean> => (await admin.group('mailer')).partitions.every((p) => p.leaseOwner !== null);

    // A forced delete: the worker takes the group back as a new group, from the end.
    await admin.deleteGroup('mailer', { force: true });
    await waitFor(taken, 'the group taken back after its delete');
    await publish(first, 10, 20);
    await waitFor(() => missing(10, 20).length === 0, 'events after the delete');
    expect(Array.from({ length: 10 }, (_, n) => handlings.get(n))).toEqual(Array(10).fill(1));

    // Another app in the same process, on a flushed Redis: a new log, no loss.
    await first.close();
    apps = [];
    const redis = new Redis(server.url);
    try {
      await redis.flushall();
      await redis.xadd(keys.stream(0), '*', 'event', 'mail', 'data', JSON.stringify({ n: 50 }));
      const second = await start(2);
      await waitFor(
        async () =>
          (
            await second
              .get(EventrailAdmin)
              .group('mailer')
              .catch(() => null)
          )?.partitions.every((p) => p.committed),
        'offsets',
      );
      await publish(second, 60, 70);
      await waitFor(() => missing(60, 70).length === 0, 'events of the second app');
      // Started from the end: the entry appended before it started is not handled.
      expect(handled.has(50)).toBe(false);
    } finally {
      redis.disconnect();
    }
    expect(lost).toEqual([]);
    expect(errors.mock.calls.map(([message]) => String(message)).filter((m) => m.includes('vanished'))).toEqual([]);
  });
});
