import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailModuleOptions, EventrailPublisher, NonRetryableError, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { n: number };

/**
 * The handlers' dependency (a database, say): down while `up` is false. Each
 * call is recorded with the time it failed, so a test can wait for an outage
 * to outlast what `maxRetries` alone would allow.
 */
const dependency = {
  up: true,
  invalid: new Set<number>(),
  attempts: [] as Array<{ n: number; attempt: number; at: number }>,
  handled: [] as number[],
  batches: [] as number[][],
  call(n: number, attempt: number): void {
    this.attempts.push({ n, attempt, at: Date.now() });
    if (this.invalid.has(n)) throw new NonRetryableError(`entry ${n} can never be booked`);
    if (!this.up) throw new Error('connection refused');
  },
};

const LOCK_TTL_MS = 500;
/**
 * The books group's lease: its first test checks that the lease is never lost while an entry is retried
 * in place, and a 500 ms lease lapses whenever the test process stalls that long (a loaded host).
 */
const BOOKS_LOCK_TTL_MS = 1_500;
/** Quick retries so a test is short; the default `maxRetries` (5) would be spent within a few dozen milliseconds. */
const QUICK = {
  ordering: 'partition',
  retryBackoffMs: 2,
  retryBackoffMaxMs: 20,
  lockTtlMs: LOCK_TTL_MS,
  heartbeatTtlMs: LOCK_TTL_MS,
} as const;

@Injectable()
class Bookkeeper {
  @OnEvent('ledger.entry', {
    group: 'books',
    maxRetryAgeMs: 600_000,
    ...QUICK,
    lockTtlMs: BOOKS_LOCK_TTL_MS,
    heartbeatTtlMs: BOOKS_LOCK_TTL_MS,
  })
  book(message: EventrailMessage<Data>): void {
    dependency.call(message.data.n, message.attempt);
    dependency.handled.push(message.data.n);
  }
}

@Injectable()
class ShortBudget {
  @OnEvent('ledger.entry', { group: 'short', maxRetryAgeMs: 300, ...QUICK })
  book(message: EventrailMessage<Data>): void {
    dependency.call(message.data.n, message.attempt);
    dependency.handled.push(message.data.n);
  }
}

@Injectable()
class MediumBudget {
  @OnEvent('ledger.entry', { group: 'medium', maxRetryAgeMs: 1_500, ...QUICK })
  book(message: EventrailMessage<Data>): void {
    dependency.call(message.data.n, message.attempt);
    dependency.handled.push(message.data.n);
  }
}

@Injectable()
class BatchBookkeeper {
  @OnEvent('ledger.entry', { group: 'bulk', maxRetryAgeMs: 600_000, batch: { maxSize: 10 }, ...QUICK })
  book(messages: EventrailMessage<Data>[]): void {
    for (const m of messages) dependency.call(m.data.n, m.attempt);
    dependency.batches.push(messages.map((m) => m.data.n));
    for (const m of messages) dependency.handled.push(m.data.n);
  }
}

@Injectable()
class SlowRetries {
  @OnEvent('ledger.entry', {
    group: 'slow',
    ordering: 'partition',
    maxRetryAgeMs: 600_000,
    retryBackoffMs: 3_600_000,
    retryBackoffMaxMs: 3_600_000,
  })
  book(message: EventrailMessage<Data>): void {
    dependency.call(message.data.n, message.attempt);
    dependency.handled.push(message.data.n);
  }
}

describe('retry by time (maxRetryAgeMs)', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];

  const start = async (providers: unknown[], options: EventrailModuleOptions = {}): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, ...options }, providers as never[]);
    apps.push(app);
    return app;
  };
  const publishAll = (app: INestApplicationContext, ns: number[]) =>
    app.get(EventrailPublisher).publishMany(ns.map((n) => ({ event: 'ledger.entry', data: { n }, key: 'account-1' })));
  const attemptsOf = (n: number) => dependency.attempts.filter((a) => a.n === n);

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('age');
    keys = new EventrailKeys(prefix, 1);
    Object.assign(dependency, { up: true, invalid: new Set(), attempts: [], handled: [], batches: [] });
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('waits out an outage longer than maxRetries would last: nothing dead-lettered, everything handled in order after', async () => {
    const app = await start([Bookkeeper]);
    dependency.up = false;
    const published = await publishAll(app, [1, 2, 3]);
    const lease = await waitFor(() => redis.get(keys.lease('books', 0)), 'the lease taken');
    // Far past the default maxRetries (5), and for longer than three lease TTLs.
    await waitFor(
      () => attemptsOf(1).length > 15 && Date.now() - attemptsOf(1)[0].at > 3 * BOOKS_LOCK_TTL_MS,
      () => `entry 1 failing for a while (${attemptsOf(1).length} attempts)`,
    );
    const admin = app.get(EventrailAdmin);
    expect(await admin.deadLetterCount('books')).toBe(0);
    // The partition waited: nothing after entry 1 was tried. The lease was renewed meanwhile, never lost.
    expect(new Set(dependency.attempts.map((a) => a.n))).toEqual(new Set([1]));
    expect(await redis.get(keys.lease('books', 0))).toBe(lease);

    dependency.up = true;
    await waitFor(async () => (await redis.get(keys.offset('books', 0))) === published[2].offset, 'the offset past the three');
    expect(dependency.handled).toEqual([1, 2, 3]);
    expect(await admin.deadLetterCount('books')).toBe(0);
  });

  it('dead-letters a message once it has been failing for maxRetryAgeMs, and goes on', async () => {
    const app = await start([ShortBudget]);
    dependency.up = false;
    const published = await publishAll(app, [1]);
    const admin = app.get(EventrailAdmin);
    await waitFor(async () => (await admin.deadLetterCount('short')) === 1, 'entry 1 dead-lettered');
    const [letter] = await admin.deadLetters('short');
    expect(letter).toMatchObject({ eventId: published[0].id, reason: 'retries-exhausted', error: { message: 'connection refused' } });
    expect(letter.failedAt.getTime() - letter.firstFailedAt.getTime()).toBeGreaterThanOrEqual(300);
    expect(letter.attempts).toBe(attemptsOf(1).length);

    dependency.up = true;
    await publishAll(app, [2]);
    await waitFor(() => dependency.handled.includes(2), 'the next entry handled');
  });

  it('keeps the budget across a restart: the next worker counts from the first failure anywhere', async () => {
    const first = await start([MediumBudget]);
    dependency.up = false;
    const published = await publishAll(first, [1]);
    await waitFor(() => attemptsOf(1).length >= 3, 'entry 1 failing in the first worker');
    await first.close();
    apps = apps.filter((app) => app !== first);
    const firstFailure = attemptsOf(1)[0].at;
    const inFirst = attemptsOf(1).length;

    const second = await start([MediumBudget]);
    const admin = second.get(EventrailAdmin);
    await waitFor(async () => (await admin.deadLetterCount('medium')) === 1, 'entry 1 dead-lettered by the second worker', 30_000);
    const [letter] = await admin.deadLetters('medium');
    const secondStart = attemptsOf(1)[inFirst].at;
    expect(letter).toMatchObject({ eventId: published[0].id, reason: 'retries-exhausted' });
    // The budget ran from the first worker's first failure, not from the second worker's first attempt.
    // Kept on the Redis clock as each worker reads it, which is off by up to half a round trip (a reply a
    // busy event loop read late makes that round trip long: 100 ms of room).
    expect(letter.firstFailedAt.getTime()).toBeGreaterThanOrEqual(firstFailure - 100);
    expect(letter.firstFailedAt.getTime()).toBeLessThan(secondStart);
    expect(letter.failedAt.getTime() - letter.firstFailedAt.getTime()).toBeGreaterThanOrEqual(1_500);
  });

  it('starts a fresh budget for an entry handled again after a reset: the time of its earlier failures is forgotten once it was committed', async () => {
    // A budget of ten minutes: nothing here depends on how fast the machine is.
    const app = await start([Bookkeeper]);
    dependency.up = false;
    const published = await publishAll(app, [1]);
    await waitFor(() => attemptsOf(1).length >= 2, 'entry 1 failing');
    const memory = keys.recovery('books', 0);
    expect(await redis.hget(memory, 'failingAt')).toBe(published[0].offset);
    dependency.up = true;
    await waitFor(async () => (await redis.get(keys.offset('books', 0))) === published[0].offset, 'entry 1 handled and committed');
    // The commit that reached the entry ended its failure memory.
    expect(await redis.hmget(memory, 'failingAt', 'failingSince')).toEqual([null, null]);
    const earlier = attemptsOf(1).length;

    // Handled again from the start, and failing again: its budget runs from this failure, not the first run's.
    dependency.up = false;
    await app.get(EventrailAdmin).resetOffsets('books', 'start', { force: true });
    await waitFor(() => attemptsOf(1).length >= earlier + 2, 'entry 1 failing on the second run');
    const since = Number(await waitFor(() => redis.hget(memory, 'failingSince'), 'the failure remembered'));
    // Stored on the Redis clock as the worker reads it, which is off by up to half a round trip (100 ms of room).
    expect(since).toBeGreaterThanOrEqual(attemptsOf(1)[earlier].at - 100);
    expect(since).toBeGreaterThan(attemptsOf(1)[0].at + 20);
    dependency.up = true;
    await waitFor(() => dependency.handled.length === 2, 'entry 1 handled again');
    expect(await app.get(EventrailAdmin).deadLetterCount('books')).toBe(0);
  });

  it('forgets the failure memory of a partition on an offset reset', async () => {
    const app = await start([Bookkeeper]);
    dependency.up = false;
    const published = await publishAll(app, [1]);
    const memory = keys.recovery('books', 0);
    await waitFor(async () => (await redis.hget(memory, 'failingAt')) === published[0].offset, 'entry 1 failing');
    await app.close();
    apps = [];
    // Reset while the entry is still failing (nothing committed past it): the replay starts a fresh budget too.
    const admin = (await start([Bookkeeper], { autoStart: false })).get(EventrailAdmin);
    await admin.resetOffsets('books', 'start');
    expect(await redis.hmget(memory, 'failingAt', 'failingSince')).toEqual([null, null]);
  });

  it('still dead-letters a NonRetryableError at once', async () => {
    const app = await start([Bookkeeper]);
    dependency.invalid.add(1);
    const published = await publishAll(app, [1, 2]);
    await waitFor(async () => (await redis.get(keys.offset('books', 0))) === published[1].offset, 'the offset past both');
    const [letter] = await app.get(EventrailAdmin).deadLetters('books');
    expect(letter).toMatchObject({ reason: 'non-retryable', attempts: 1 });
    expect(dependency.handled).toEqual([2]);
  });

  it('retries a batch whole through the outage, then handles it in one call', async () => {
    const app = await start([BatchBookkeeper]);
    dependency.up = false;
    const published = await publishAll(app, [1, 2, 3, 4]);
    await waitFor(
      () => attemptsOf(1).length > 15,
      () => `the batch failing for a while (${attemptsOf(1).length} attempts)`,
    );
    dependency.up = true;
    await waitFor(async () => (await redis.get(keys.offset('bulk', 0))) === published[3].offset, 'the offset past the batch');
    expect(await app.get(EventrailAdmin).deadLetterCount('bulk')).toBe(0);
    expect(dependency.handled).toEqual([1, 2, 3, 4]);
    // Handled once each, in order: the batch was retried whole and never split (the time budget was not spent).
    expect(dependency.batches.flat()).toEqual([1, 2, 3, 4]);
  });

  it('ends a long retry wait on shutdown, leaving the message uncommitted', async () => {
    const app = await start([SlowRetries]);
    dependency.up = false;
    await publishAll(app, [1]);
    await waitFor(() => attemptsOf(1).length === 1, 'the first attempt');
    // The next retry is an hour away: close() returns only because the stop ends the wait.
    await app.close();
    apps = [];
    expect(await redis.get(keys.offset('slow', 0))).not.toBe((await redis.xrange(keys.stream(0), '-', '+'))[0][0]);
    expect(attemptsOf(1)).toHaveLength(1);
  });
});
