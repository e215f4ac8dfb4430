import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const LOCK_TTL_MS = 600;
/** Two deliveries counted would dead-letter the entry as `max-deliveries`. */
const MAX_DELIVERIES = 2;
/** Lease losses each test causes while the entry is failing: more than `maxDeliveries`. */
const STALLS = 3;

/**
 * A handler whose dependency is down until `failUntilAttempt`: the entry
 * retries by time (`maxRetryAgeMs`), in place. `stall` decides what happens
 * on a failing attempt to make the lease lapse while the process stays alive.
 */
const world = {
  attempts: [] as number[],
  handled: [] as number[],
  failUntilAttempt: Infinity,
  stall: (_attempt: number): void | Promise<void> => undefined,
};

@Injectable()
class Ledger {
  @OnEvent('entry.booked', {
    group: 'ledger',
    ordering: 'partition',
    maxRetryAgeMs: 600_000,
    retryBackoffMs: 5,
    retryBackoffMaxMs: 50,
    lockTtlMs: LOCK_TTL_MS,
    heartbeatTtlMs: LOCK_TTL_MS,
    maxDeliveries: MAX_DELIVERIES,
  })
  async book(message: EventrailMessage<{ n: number }>): Promise<void> {
    world.attempts.push(message.data.n);
    if (world.attempts.length < world.failUntilAttempt) {
      await world.stall(world.attempts.length);
      throw new Error('ledger database unavailable');
    }
    world.handled.push(message.data.n);
  }
}

/** The same with `ordering: 'key'`: the entry is parked at its first failure and retried by redeliveries. */
@Injectable()
class ParkingLedger {
  @OnEvent('entry.booked', {
    group: 'ledger-key',
    ordering: 'key',
    maxRetries: 1,
    retryBackoffMs: 5,
    retryBackoffMaxMs: 20,
    redelivery: { delayMs: 20, maxDelayMs: 100, maxAgeMs: 600_000 },
    lockTtlMs: LOCK_TTL_MS,
    heartbeatTtlMs: LOCK_TTL_MS,
    maxDeliveries: MAX_DELIVERIES,
  })
  async book(message: EventrailMessage<{ n: number }>): Promise<void> {
    world.attempts.push(message.data.n);
    if (world.attempts.length < world.failUntilAttempt) {
      await world.stall(world.attempts.length);
      throw new Error('ledger database unavailable');
    }
    world.handled.push(message.data.n);
  }
}

/**
 * A live worker whose lease lapses (its event loop or its Redis stalled past
 * `lockTtlMs`) takes its partition again. That is not a crash: no delivery is
 * counted, so an entry retrying by time is not dead-lettered as
 * `max-deliveries` however often it happens. (A worker killed by pid still
 * counts: test/consumer/crash-loop.e2e.spec.ts.)
 */
describe('lease stalls of a live worker are not crashes', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;
  let losses: number;

  beforeEach(() => {
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('stall');
    losses = 0;
    Object.assign(world, { attempts: [], handled: [], failUntilAttempt: Infinity, stall: () => undefined });
  });

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  const start = async (handler: new () => unknown = Ledger): Promise<INestApplicationContext> => {
    app = await createApp({ prefix, metrics: { onLeaseLost: () => losses++ } }, [handler]);
    return app;
  };

  /** Lets the entry succeed after `STALLS` lease losses, and checks it was handled, not dead-lettered. */
  const expectHandledAfterStalls = async (started: INestApplicationContext, group = 'ledger'): Promise<void> => {
    const admin = started.get(EventrailAdmin);
    await waitFor(
      async () => losses >= STALLS || (await admin.deadLetterCount(group)) > 0,
      () => `${STALLS} lease losses (so far ${losses}, ${world.attempts.length} attempts)`,
      30_000,
    );
    const reasons = (await admin.deadLetters(group)).map((d) => `${d.reason}: ${d.error.message}`);
    expect(reasons).toEqual([]);
    // No stall from here on: one more, between the attempt that succeeds and its commit, would lose the lease
    // again and have the entry handled twice (which at-least-once allows, and the last check does not).
    world.stall = () => undefined;
    world.failUntilAttempt = world.attempts.length + 2;
    await waitFor(
      () => world.handled.length === 1,
      () => `entry 1 handled (${world.attempts.length} attempts, ${losses} lease losses)`,
      30_000,
    );
    expect(await admin.deadLetterCount(group)).toBe(0);
    expect(world.handled).toEqual([1]);
  };

  it('an event-loop stall past the lease, again and again, does not dead-letter an entry retrying by time', async () => {
    world.stall = (attempt) => {
      // Every fifth attempt blocks the event loop past the lease: no renewal can run meanwhile.
      if (attempt % 5 !== 1) return;
      const until = performance.now() + LOCK_TTL_MS * 1.8;
      while (performance.now() < until) {
        // busy: this is the fault being injected, not a wait for a condition
      }
    };
    const started = await start();
    await started.get(EventrailPublisher).publish('entry.booked', { n: 1 });
    await expectHandledAfterStalls(started);
  });

  it('Redis paused past the lease, again and again, does not dead-letter an entry retrying by time', async () => {
    const pauser = new Redis(testRedisUrl());
    try {
      let pausedAt = 0;
      world.stall = async () => {
        // Once per lease taken: the pause outlasts the lease while this live worker waits on Redis.
        if (losses < pausedAt || pausedAt >= STALLS) return;
        pausedAt = losses + 1;
        await pauser.client('PAUSE', String(Math.round(LOCK_TTL_MS * 1.8)), 'ALL');
      };
      const started = await start();
      await started.get(EventrailPublisher).publish('entry.booked', { n: 1 });
      await expectHandledAfterStalls(started);
    } finally {
      pauser.disconnect();
    }
  });

  it('with parked keys, a stall past the lease during a redelivery, again and again, does not dead-letter the parked head', async () => {
    world.stall = (attempt) => {
      // Redeliveries only (the first attempt is the fetch's, which parks the entry): every other one blocks the event loop.
      if (attempt < 2 || attempt % 2 !== 0) return;
      const until = performance.now() + LOCK_TTL_MS * 1.8;
      while (performance.now() < until) {
        // busy: this is the fault being injected, not a wait for a condition
      }
    };
    const started = await start(ParkingLedger);
    await started.get(EventrailPublisher).publish('entry.booked', { n: 1 });
    await expectHandledAfterStalls(started, 'ledger-key');
  });
});
