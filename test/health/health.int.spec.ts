import { INestApplicationContext, Injectable, ServiceUnavailableException } from '@nestjs/common';
import { HealthCheckService, TerminusModule } from '@nestjs/terminus';
import Redis from 'ioredis';
import {
  EventrailAdmin,
  EventrailConsumers,
  EventrailMessage,
  EventrailModuleOptions,
  EventrailPublisher,
  InvalidOptionError,
  NonRetryableError,
  OnEvent,
} from '../../lib';
import { EventrailHealthIndicator, EventrailHealthModule, EventrailHealthOptions, GroupHealth } from '../../lib/health';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

/** Holds handlers while closed, so a test can keep entries uncommitted (lag) for as long as it looks. */
class Gate {
  private waiters: Array<() => void> = [];
  private closed = false;

  close(): void {
    this.closed = true;
  }

  open(): void {
    this.closed = false;
    for (const wake of this.waiters.splice(0)) wake();
  }

  pass(): Promise<void> {
    return this.closed ? new Promise((resolve) => this.waiters.push(resolve)) : Promise.resolve();
  }
}

const gate = new Gate();
const started: number[] = [];
const handled: number[] = [];

@Injectable()
class Books {
  // Long TTLs: lease renewals and heartbeats run every 20 s, so nothing re-takes a
  // lease a test removed until the test tells the workers to rebalance.
  @OnEvent('entry.booked', { group: 'books', lockTtlMs: 60_000, heartbeatTtlMs: 60_000 })
  async book(message: EventrailMessage<{ n: number; bad?: boolean }>): Promise<void> {
    if (message.data.bad) throw new NonRetryableError(`entry ${message.data.n} cannot be booked`);
    started.push(message.data.n);
    await gate.pass();
    handled.push(message.data.n);
  }
}

/** Entries whose handler of group `stuck` was entered; that handler never settles. */
const stuckEntered: number[] = [];

@Injectable()
class Stuck {
  // A short shutdownTimeoutMs: app.close() gives up on the hung handler at once.
  @OnEvent('entry.stuck', { group: 'stuck', lockTtlMs: 60_000, heartbeatTtlMs: 60_000, shutdownTimeoutMs: 50 })
  hang(message: EventrailMessage<{ n: number }>): Promise<void> {
    stuckEntered.push(message.data.n);
    return new Promise<void>(() => undefined);
  }
}

interface Booted {
  app: INestApplicationContext;
  indicator: EventrailHealthIndicator;
  check(options?: EventrailHealthOptions): Promise<Report>;
}

/** The indicator's result under the default key, typed for the assertions. */
interface Report {
  status: 'up' | 'down';
  message?: string;
  responseTimeMs?: number;
  timeoutMs?: number;
  workerId?: string;
  groups?: Record<string, GroupHealth>;
}

describe('EventrailHealthIndicator', () => {
  let redis: Redis;
  let prefix: string;
  let apps: INestApplicationContext[] = [];
  let server: RedisServer | undefined;

  /** A Nest app as a user would build it: EventrailModule, TerminusModule and EventrailHealthModule. */
  const boot = async (
    options: EventrailModuleOptions = {},
    providers: Array<new (...args: never[]) => unknown> = [Books],
  ): Promise<Booted> => {
    const app = await createApp({ prefix, partitions: 2, ...options }, providers, [TerminusModule, EventrailHealthModule]);
    apps.push(app);
    const indicator = app.get(EventrailHealthIndicator);
    const check = async (checkOptions?: EventrailHealthOptions): Promise<Report> =>
      (await indicator.isHealthy('eventrail', checkOptions)).eventrail as Report;
    return { app, indicator, check };
  };

  const upWithin = (check: () => Promise<Report>, what: string): Promise<Report> => {
    let last: Report | undefined;
    return waitFor(
      async () => {
        last = await check();
        return last.status === 'up' ? last : null;
      },
      () => `${what}; last report: ${JSON.stringify(last)}`,
    );
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('hlth');
    started.length = 0;
    handled.length = 0;
    stuckEntered.length = 0;
  });
  afterEach(async () => {
    gate.open(); // a held handler would hold app.close() for shutdownTimeoutMs
    if (server) resume(server.pid); // a failed test may have left it stopped
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await server?.stop();
    server = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('is up while consuming: Redis answers, the worker runs and holds every partition, no lag, no dead letters', async () => {
    const { app, check, indicator } = await boot();
    const publisher = app.get(EventrailPublisher);
    await publisher.publishMany([0, 1].map((p) => ({ event: 'entry.booked', data: { n: p }, partition: p })));
    await waitFor(() => handled.length === 2, 'both entries handled');

    // Strictest limits: up only once both commits landed (lag 0).
    const report = await upWithin(() => check({ maxLag: 0, maxDeadLetters: 0 }), 'healthy with lag 0');
    expect(report).toEqual({
      status: 'up',
      responseTimeMs: expect.any(Number),
      workerId: app.get(EventrailConsumers).workerId,
      groups: {
        books: {
          status: 'up',
          running: true,
          members: 1,
          ownedHere: [0, 1],
          unowned: [],
          lag: 0,
          lagCapped: false,
          deadLetters: 0,
          parked: 0,
          stalled: [],
          problems: [],
        },
      },
      // What the server would do when memory runs out (the test server evicts nothing).
      evictionPolicies: [{ node: expect.stringMatching(/^127\.0\.0\.1:\d+$/), policy: 'noeviction' }],
      // Which primary holds which partitions: one node here, three on a 3-master cluster.
      nodes: [{ node: expect.stringMatching(/^127\.0\.0\.1:\d+$/), replicas: [], slots: [[0, 16383]], partitions: [0, 1] }],
    });

    // Through Terminus, under a key of the caller's choice.
    const result = await app.get(HealthCheckService).check([() => indicator.isHealthy('events', { timeoutMs: 2_000 })]);
    expect(result).toMatchObject({ status: 'ok', info: { events: { status: 'up' } }, error: {} });

    // A wrong limit is a programming mistake: it throws, naming the option.
    await expect(indicator.isHealthy('eventrail', { maxLag: -1 })).rejects.toThrow(InvalidOptionError);
    await expect(indicator.isHealthy('eventrail', { timeoutMs: 0 })).rejects.toThrow(/timeoutMs/);
    await expect(indicator.isHealthy('eventrail', { maxStallMs: 0 })).rejects.toThrow(/maxStallMs/);
    // A misspelt option fails rather than turning a check off.
    await expect(indicator.isHealthy('eventrail', { maxStall: 100 } as EventrailHealthOptions)).rejects.toThrow(/health\.maxStall:/);
  });

  it('is up when the partitions are covered by live members in other processes', async () => {
    const first = await boot();
    const second = await boot();
    const owned = (b: Booted): number[] => b.app.get(EventrailConsumers).ownership().books ?? [];
    await waitFor(
      () => owned(first).length === 1 && owned(second).length === 1,
      () => `one partition each; ownership ${JSON.stringify([owned(first), owned(second)])}`,
    );

    for (const booted of [first, second]) {
      const report = await upWithin(() => booted.check(), 'healthy with the partitions split');
      expect(report.groups?.books).toMatchObject({ running: true, members: 2, ownedHere: owned(booted), unowned: [] });
    }
    expect([...owned(first), ...owned(second)].sort()).toEqual([0, 1]);
  });

  it('is down, with the lag per group, when the lag is over maxLag; up again once consumed', async () => {
    const { app, check } = await boot();
    gate.close();
    await app.get(EventrailPublisher).publishMany([1, 2, 3].map((n) => ({ event: 'entry.booked', data: { n }, partition: 0 })));
    // The first entry is held in its handler: nothing of the batch is committed, all three count as lag.
    await waitFor(() => started.length === 1, 'first entry in its handler');

    const down = await check({ maxLag: 2 });
    expect(down).toMatchObject({ status: 'down', message: 'books: lag 3 is over maxLag 2' });
    expect(down.groups?.books).toMatchObject({ status: 'down', running: true, lag: 3, unowned: [], problems: ['lag 3 is over maxLag 2'] });
    // The limit is inclusive.
    expect((await check({ maxLag: 3 })).status).toBe('up');

    // Terminus turns it into a 503 carrying the details.
    const failure = await app
      .get(HealthCheckService)
      .check([() => app.get(EventrailHealthIndicator).isHealthy('eventrail', { maxLag: 2 })])
      .then(
        () => null,
        (error: unknown) => error,
      );
    expect(failure).toBeInstanceOf(ServiceUnavailableException);
    expect((failure as ServiceUnavailableException).getResponse()).toMatchObject({
      status: 'error',
      error: { eventrail: { status: 'down', groups: { books: { lag: 3 } } } },
    });

    gate.open();
    const up = await upWithin(() => check({ maxLag: 0 }), 'healthy once the backlog is consumed');
    expect(up.groups?.books.lag).toBe(0);
  });

  it('is down when the dead letters are over maxDeadLetters; up again once they are purged', async () => {
    const { app, check } = await boot();
    await app.get(EventrailPublisher).publishMany([
      { event: 'entry.booked', data: { n: 1, bad: true }, partition: 0 },
      { event: 'entry.booked', data: { n: 2, bad: true }, partition: 1 },
      { event: 'entry.booked', data: { n: 3 }, partition: 0 },
    ]);
    const admin = app.get(EventrailAdmin);
    await waitFor(async () => (await admin.group('books')).deadLetters === 2 && handled.includes(3), 'two dead letters, one handled');

    const down = await check({ maxDeadLetters: 1 });
    expect(down).toMatchObject({ status: 'down', message: 'books: 2 dead letters, over maxDeadLetters 1' });
    expect(down.groups?.books).toMatchObject({ status: 'down', deadLetters: 2, problems: ['2 dead letters, over maxDeadLetters 1'] });
    expect((await check({ maxDeadLetters: 2 })).status).toBe('up');
    // Without a limit, dead letters are reported but do not count.
    expect(await check()).toMatchObject({ status: 'up', groups: { books: { deadLetters: 2 } } });

    await admin.purgeDeadLetters('books');
    expect((await check({ maxDeadLetters: 0 })).status).toBe('up');
  });

  it('is down when a partition has no live lease, and when the worker stopped', async () => {
    const { app, check } = await boot();
    await upWithin(() => check(), 'healthy at start');
    const keys = new EventrailKeys(prefix, 2);
    const lease = keys.lease('books', 1);

    // The lease of partition 1 vanishes (as after an admin reset). Renewals run every 20 s and
    // nothing is published, so the worker does not notice until told to rebalance below.
    await redis.del(lease);
    const noLease = await check();
    expect(noLease).toMatchObject({ status: 'down', message: 'books: partition 1: no lease (nobody consumes it)' });
    expect(noLease.groups?.books).toMatchObject({ running: true, ownedHere: [0, 1], unowned: [1] });

    // A lease held by a worker that is not a live member (it died, its heartbeat expired, its lease has not yet).
    await redis.set(lease, 'gone-host:4242:deadbeef:7', 'PX', 60_000);
    const deadOwner = await check();
    expect(deadOwner.status).toBe('down');
    expect(deadOwner.groups?.books).toMatchObject({
      unowned: [1],
      problems: ['partition 1 (gone-host:4242:deadbeef): lease held by a worker that is not a live member'],
    });

    // Freed and announced: the worker finds its lease gone, drops the partition and takes it again.
    await redis.del(lease);
    await redis.publish(keys.rebalanceChannel, 'books');
    await upWithin(() => check(), 'healthy once partition 1 is taken again');

    // Consumers stopped: no worker here, leases released, nobody covers the partitions.
    await app.get(EventrailConsumers).stop();
    const stopped = await check();
    expect(stopped.status).toBe('down');
    expect(stopped.groups?.books).toMatchObject({
      status: 'down',
      running: false,
      members: 0,
      unowned: [0, 1],
      problems: ['no running worker in this process (consumers not started, or stopped)', 'partitions 0, 1: no lease (nobody consumes it)'],
    });
  });

  it('is down, naming the partition, when a handler never settles: its offset stands still while it has lag', async () => {
    const { app, check } = await boot({}, [Stuck]);
    await app.get(EventrailPublisher).publishMany([1, 2].map((n) => ({ event: 'entry.stuck', data: { n }, partition: 1 })));
    await waitFor(() => stuckEntered.length === 1, 'first entry in its handler');

    // Leases, members and (without limits) lag all look fine: only the stall check tells.
    expect(await check()).toMatchObject({ status: 'up', groups: { stuck: { lag: 2 } } });
    let last: Report | undefined;
    const stalled = await waitFor(
      async () => {
        last = await check({ maxStallMs: 100 });
        return last.status === 'down' ? last : null;
      },
      () => `stalled; last report: ${JSON.stringify(last)}`,
    );
    expect(stalled.groups?.stuck).toMatchObject({ status: 'down', running: true, unowned: [], lag: 2, stalled: [1] });
    expect(stalled.message).toMatch(
      /^stuck: partition 1 stalled: committed offset 0-0 has not moved for \d+ ms \(maxStallMs 100\) while 2 entries wait$/,
    );
    // The handler is still in its first entry: nothing was retried or dead-lettered behind the check's back.
    expect(stuckEntered).toEqual([1]);
  });

  it('sees a stall end once the offset moves, and forgets partitions that caught up', async () => {
    const { app, check } = await boot();
    gate.close();
    await app.get(EventrailPublisher).publishMany([1, 2, 3].map((n) => ({ event: 'entry.booked', data: { n }, partition: 0 })));
    await waitFor(() => started.length === 1, 'first entry in its handler');
    const stalled = await waitFor(async () => {
      const report = await check({ maxStallMs: 50 });
      return report.status === 'down' ? report : null;
    }, 'stalled while the gate is closed');
    expect(stalled.groups?.books).toMatchObject({ stalled: [0], lag: 3 });

    gate.open();
    const up = await upWithin(() => check({ maxStallMs: 50, maxLag: 0 }), 'healthy once consumed');
    expect(up.groups?.books).toMatchObject({ lag: 0, stalled: [] });
  });

  it('with handlerTimeoutMs, a hung handler is timed out, retried and dead-lettered, and the partition moves on', async () => {
    const { app, check } = await boot(
      { groups: { stuck: { ordering: 'partition', handlerTimeoutMs: 50, maxRetries: 1, retryBackoffMs: 10 } } },
      [Stuck],
    );
    await app.get(EventrailPublisher).publishMany([1, 2].map((n) => ({ event: 'entry.stuck', data: { n }, partition: 0 })));
    await waitFor(async () => (await app.get(EventrailAdmin).group('stuck')).deadLetters === 2, 'both dead-lettered');
    const up = await upWithin(() => check({ maxStallMs: 50, maxLag: 0 }), 'healthy: nothing waits');
    expect(up.groups?.stuck).toMatchObject({ lag: 0, deadLetters: 2, stalled: [] });
    // Two attempts each (maxRetries: 1), every one of them timed out.
    expect(stuckEntered).toEqual([1, 1, 2, 2]);
  });

  it('keeps its own work bounded: probes of a Redis that does not answer add no commands behind the first', async () => {
    server = await startRedisServer();
    const { app, check } = await boot({ redis: server.url, partitions: 4 });
    const observer = new Redis(server.url);
    try {
      gate.close(); // lag on two partitions, so every check also counts lag
      await app.get(EventrailPublisher).publishMany([0, 0, 1, 1].map((p, n) => ({ event: 'entry.booked', data: { n }, partition: p })));
      await upWithin(() => check({ timeoutMs: 5_000 }), 'healthy at start');
      const commands = (): Promise<number> => commandsProcessed(observer);

      // What one check costs when Redis answers.
      const beforeOne = await commands();
      expect((await check({ timeoutMs: 5_000 })).status).toBe('up');
      const one = (await commands()) - beforeOne;

      // A probe every few milliseconds while Redis is stopped: each gives up at its timeout.
      const before = await commands();
      process.kill(server.pid, 'SIGSTOP');
      const probes: Report[] = [];
      for (let i = 0; i < 20; i++) probes.push(await check({ timeoutMs: 50 }));
      process.kill(server.pid, 'SIGCONT');

      // The next check waits for what the stopped ones left, then makes its own reads: at most the
      // first stopped check's commands (it stops at its abort, before counting lag) and one full check.
      expect((await check({ timeoutMs: 5_000 })).status).toBe('up');
      const sent = (await commands()) - before;
      if (process.env.HEALTH_FIGURES) console.log(`one check: ${one} commands; 20 stopped probes and one check: ${sent}`);
      expect(sent).toBeLessThanOrEqual(2 * one);

      expect(probes[0]).toEqual({ status: 'down', message: 'Redis did not answer within 50 ms', timeoutMs: 50 });
      for (const probe of probes.slice(1)) {
        expect(probe).toEqual({
          status: 'down',
          message: "Redis did not answer within 50 ms (an earlier check's commands are still unanswered)",
          timeoutMs: 50,
        });
      }
    } finally {
      observer.disconnect();
    }
  });

  it('is down, not a throw, when Redis does not answer within timeoutMs, and up again when it does', async () => {
    server = await startRedisServer();
    const { check } = await boot({ redis: server.url });
    await upWithin(() => check({ timeoutMs: 2_000 }), 'healthy at start');

    process.kill(server.pid, 'SIGSTOP');
    const before = Date.now();
    const frozen = await check({ timeoutMs: 300 });
    const took = Date.now() - before;
    expect(frozen).toEqual({ status: 'down', message: 'Redis did not answer within 300 ms', timeoutMs: 300 });
    expect(took).toBeGreaterThanOrEqual(290);
    expect(took).toBeLessThan(5_000); // not waiting for Redis: the check gave up at its timeout

    process.kill(server.pid, 'SIGCONT');
    await upWithin(() => check({ timeoutMs: 2_000 }), 'healthy once Redis answers again');

    // Gone altogether: reported at once from the connection state.
    await server.stop();
    const gone = await waitFor(async () => {
      const report = await check({ timeoutMs: 2_000 });
      return report.status === 'down' ? report : null;
    }, 'down once Redis is gone');
    expect(gone.message).toMatch(/^Redis (is not connected|did not answer)/);

    // Back on the same port (empty, no persistence) so the app shuts down promptly.
    server = await startRedisServer(server.port);
    await waitFor(async () => !/^Redis/.test((await check({ timeoutMs: 2_000 })).message ?? ''), 'reconnected');
  });
});

/**
 * Commands the server has processed, from INFO commandstats, leaving out the
 * consumers' background work (blocked reads, heartbeat and lease scripts,
 * rebalance announcements) and the INFO calls that read it.
 */
async function commandsProcessed(redis: Redis): Promise<number> {
  const background = new Set(['info', 'xread', 'evalsha', 'eval', 'publish', 'subscribe', 'client', 'hello', 'select']);
  let total = 0;
  for (const [, name, calls] of (await redis.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (!background.has(name.split('|')[0])) total += Number(calls);
  }
  return total;
}

/** SIGCONT, if the process is still there. */
function resume(pid: number): void {
  try {
    process.kill(pid, 'SIGCONT');
  } catch {
    // already gone
  }
}
