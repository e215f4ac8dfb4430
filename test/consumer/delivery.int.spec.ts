import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import {
  EventrailAdmin,
  EventrailConsumers,
  EventrailMessage,
  EventrailModuleOptions,
  EventrailPublisher,
  NonRetryableError,
  OnEvent,
  UnknownGroupError,
} from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

class InvalidOrderError extends NonRetryableError {}

type Data = { n: number };

/** What the handlers below do and saw; reset per test. */
const behaviour = {
  failing: new Set<number>(),
  invalid: new Set<number>(),
  hanging: new Set<number>(),
  slowMs: 0,
  started: [] as number[],
  billing: [] as EventrailMessage<Data>[],
  audit: [] as EventrailMessage<Data>[],
};

@Injectable()
class Billing {
  @OnEvent('order.placed', { group: 'billing', maxRetries: 2, retryBackoffMs: 5, retryBackoffMaxMs: 10, handlerTimeoutMs: 200 })
  async charge(message: EventrailMessage<Data>): Promise<void> {
    const { n } = message.data;
    behaviour.started.push(n);
    if (behaviour.invalid.has(n)) throw new InvalidOrderError(`order ${n} is invalid`);
    if (behaviour.failing.has(n)) throw new TypeError(`card declined for ${n}`);
    if (behaviour.hanging.has(n)) await new Promise(() => undefined);
    if (behaviour.slowMs) await new Promise((resolve) => setTimeout(resolve, behaviour.slowMs));
    behaviour.billing.push(message);
  }
}

@Injectable()
class Audit {
  @OnEvent('order.placed', 'audit')
  record(message: EventrailMessage<Data>): void {
    behaviour.audit.push(message);
  }
}

describe('delivery guarantees', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];

  const start = async (options: EventrailModuleOptions = {}, providers: unknown[] = [Billing, Audit]): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, ...options }, providers as never[]);
    apps.push(app);
    return app;
  };
  const billed = (): number[] => behaviour.billing.map((m) => m.data.n);
  const audited = (): number[] => behaviour.audit.map((m) => m.data.n);
  const committed = (group: string, partition = 0): Promise<string | null> => redis.get(keys.offset(group, partition));

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('dlv');
    keys = new EventrailKeys(prefix, 2); // the most partitions a test here uses
    Object.assign(behaviour, {
      failing: new Set(),
      invalid: new Set(),
      hanging: new Set(),
      slowMs: 0,
      started: [],
      billing: [],
      audit: [],
    });
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('dead-letters after the last retry with the entry and the failure, and moves on', async () => {
    const app = await start({ consumer: { ordering: 'partition' } });
    behaviour.failing.add(2);
    const published = await app
      .get(EventrailPublisher)
      .publishMany([1, 2, 3].map((n) => ({ event: 'order.placed', data: { n }, key: `o${n}` })));
    await waitFor(() => billed().includes(3), 'the event after the failing one');
    await waitFor(async () => (await committed('billing')) === published[2].offset, 'offset past the dead letter');
    expect(billed()).toEqual([1, 3]);

    const [letter, ...others] = await app.get(EventrailAdmin).deadLetters('billing');
    expect(others).toEqual([]);
    expect(letter).toMatchObject({
      eventId: published[1].id,
      event: 'order.placed',
      key: 'o2',
      data: { n: 2 },
      group: 'billing',
      partition: 0,
      offset: published[1].offset,
      reason: 'retries-exhausted',
      error: { name: 'TypeError', message: 'card declined for 2' },
      attempts: 3, // the first try and maxRetries: 2
      worker: app.get(EventrailConsumers).workerId,
    });
    expect(letter.error.stack).toContain('card declined for 2');
    expect(letter.failedAt.getTime()).toBeGreaterThanOrEqual(letter.firstFailedAt.getTime());
    expect(app.get(EventrailConsumers).stats().billing).toEqual({ handled: 2, deadLettered: 1, skippedDuplicates: 0 });
    expect(audited()).toEqual([1, 2, 3]);
  });

  it('dead-letters a NonRetryableError subclass at once, a handler timeout after its retries, and malformed entries', async () => {
    const app = await start({ consumer: { ordering: 'partition' } });
    behaviour.invalid.add(1);
    behaviour.hanging.add(2);
    await app.get(EventrailPublisher).publishMany([1, 2].map((n) => ({ event: 'order.placed', data: { n } })));
    await redis.xadd(keys.stream(0), '*', 'event', 'order.placed', 'data', '{oops');
    const last = await app.get(EventrailPublisher).publish('order.placed', { n: 4 });
    await waitFor(async () => (await committed('billing')) === last.offset, 'offset past all three');
    const letters = await app.get(EventrailAdmin).deadLetters('billing');
    expect(letters.map((l) => [l.reason, l.error.name, l.attempts])).toEqual([
      ['non-retryable', 'InvalidOrderError', 1],
      ['retries-exhausted', 'HandlerTimeoutError', 3],
      ['malformed', 'DecodeError', 0],
    ]);
    expect(letters[2].data).toBe('{oops');
    expect(letters[2].error.message).toBe('field "data" is not valid JSON');
    // The audit group has no timeout and never fails, but a malformed entry is malformed for everyone.
    const auditLetters = await app.get(EventrailAdmin).deadLetters('audit');
    expect(auditLetters.map((l) => l.reason)).toEqual(['malformed']);
    expect(billed()).toEqual([4]);
  });

  it('retries in place: the failing partition waits, other partitions do not', async () => {
    // Event 1 hangs: each attempt ends with the 200 ms handler timeout, three attempts in all.
    const app = await start({ partitions: 2, consumer: { ordering: 'partition' } });
    behaviour.hanging.add(1);
    const publisher = app.get(EventrailPublisher);
    await publisher.publish('order.placed', { n: 1 }, { partition: 0 });
    await publisher.publish('order.placed', { n: 2 }, { partition: 0 });
    await publisher.publish('order.placed', { n: 3 }, { partition: 1 });
    await waitFor(() => billed().includes(3), 'partition 1 handled');
    expect(billed()).toEqual([3]); // 2 waits behind 1's retries
    await waitFor(() => billed().includes(2), 'partition 0 moved on after the dead letter');
    expect(billed()).toEqual([3, 2]);
  });

  it('replays dead letters to the group that dead-lettered them, and only to it', async () => {
    const app = await start({ consumer: { ordering: 'partition' } });
    const admin = app.get(EventrailAdmin);
    behaviour.failing = new Set([1, 2, 3]);
    const published = await app
      .get(EventrailPublisher)
      .publishMany([1, 2, 3, 4].map((n) => ({ event: 'order.placed', data: { n }, key: `o${n}` })));
    await waitFor(() => billed().includes(4) && audited().length === 4, 'first pass');
    const letters = await admin.deadLetters('billing');
    expect(letters.map((l) => l.data)).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);

    // Paging.
    const [first] = await admin.deadLetters('billing', { count: 1 });
    expect((await admin.deadLetters('billing', { count: 5, after: first.id })).map((l) => l.id)).toEqual([letters[1].id, letters[2].id]);

    behaviour.failing.clear();
    expect(await admin.replayDeadLetters('billing', [letters[1].id])).toBe(1);
    await waitFor(() => billed().includes(2), 'replayed one');
    expect(await admin.replayDeadLetters('billing', 'all')).toBe(2);
    await waitFor(() => billed().includes(1) && billed().includes(3), 'replayed all');
    expect(billed()).toEqual([4, 2, 1, 3]);
    const replayed = behaviour.billing.filter((m) => m.data.n !== 4);
    expect(replayed.map((m) => m.id).sort()).toEqual([published[0].id, published[1].id, published[2].id].sort());
    expect(replayed.every((m) => m.attempt === 1)).toBe(true);
    expect(await admin.deadLetters('billing')).toEqual([]);

    // The audit group never sees the replays: wait until it has committed past them.
    const end = await redis.xrevrange(keys.stream(replayed[2].partition), '+', '-', 'COUNT', 1);
    await waitFor(async () => (await committed('audit', replayed[2].partition)) === end[0][0], 'audit past the replays');
    expect(audited()).toEqual([1, 2, 3, 4]);
  });

  it('replays each dead letter once per call, even when the replays fail and are dead-lettered again', async () => {
    const app = await start();
    const admin = app.get(EventrailAdmin);
    behaviour.invalid = new Set([1, 2, 3]);
    await app.get(EventrailPublisher).publishMany([1, 2, 3].map((n) => ({ event: 'order.placed', data: { n } })));
    await waitFor(async () => (await admin.deadLetters('billing')).length === 3, 'three dead letters');
    expect(await admin.replayDeadLetters('billing', 'all')).toBe(3);
    await waitFor(async () => (await admin.deadLetters('billing')).length === 3, 'dead-lettered again');
    expect(behaviour.started.filter((n) => n <= 3)).toHaveLength(6); // each ran once more, no more
  });

  it('purges dead letters and refuses unknown groups', async () => {
    const app = await start();
    const admin = app.get(EventrailAdmin);
    behaviour.invalid = new Set([1, 2]);
    await app.get(EventrailPublisher).publishMany([1, 2].map((n) => ({ event: 'order.placed', data: { n } })));
    await waitFor(async () => (await admin.deadLetters('billing')).length === 2, 'two dead letters');
    expect(await admin.purgeDeadLetters('billing')).toBe(2);
    expect(await admin.deadLetters('billing')).toEqual([]);
    await expect(admin.deadLetters('nobody')).rejects.toBeInstanceOf(UnknownGroupError);
    await expect(admin.replayDeadLetters('nobody', 'all')).rejects.toBeInstanceOf(UnknownGroupError);
  });

  it('with enableIdempotency skips an event id that is already done, across batches and within one', async () => {
    const app = await start({ consumer: { enableIdempotency: true, idempotencyTtlMs: 60_000 } });
    const publisher = app.get(EventrailPublisher);
    const first = await publisher.publish('order.placed', { n: 1 }, { id: 'order-1' });
    await waitFor(async () => (await committed('billing')) === first.offset, 'first committed');
    expect(await redis.zscore(keys.done('billing', 0), 'order-1')).not.toBeNull();

    // The same event again later (an outbox relay retrying), and twice in one batch.
    await publisher.publishMany([
      { event: 'order.placed', data: { n: 1 }, id: 'order-1' },
      { event: 'order.placed', data: { n: 2 }, id: 'order-2' },
      { event: 'order.placed', data: { n: 2 }, id: 'order-2' },
    ]);
    const last = await publisher.publish('order.placed', { n: 3 }, { id: 'order-3' });
    await waitFor(async () => (await committed('billing')) === last.offset, 'all committed');
    expect(billed()).toEqual([1, 2, 3]);
    expect(app.get(EventrailConsumers).stats().billing).toMatchObject({ handled: 3, skippedDuplicates: 2 });
    // The audit group has idempotency too (module-wide), so it skips them as well.
    expect(audited()).toEqual([1, 2, 3]);
  });

  it("with enableIdempotency skips an event id handled in the previous batch, while that batch's commit still waits to leave", async () => {
    // Each handler publishes the next event itself, so the three arrive one batch each, milliseconds apart: the
    // first batch's commit leaves at once, the second's waits out the commit spacing (25 ms), and the third
    // batch, the second event's id again (a replay next to the original), is looked up meanwhile.
    const handled: string[] = [];
    @Injectable()
    class Chain {
      constructor(private readonly publisher: EventrailPublisher) {}

      @OnEvent('chain.step', { group: 'chain', enableIdempotency: true, idempotencyTtlMs: 60_000 })
      step(message: EventrailMessage<{ next?: string }>): void {
        handled.push(message.id);
        const { next } = message.data;
        if (next !== undefined) void this.publisher.publish('chain.step', next === 'again' ? {} : { next: 'again' }, { id: 'twice' });
      }
    }
    const app = await start({ dedupWindowMs: 0 }, [Chain]);
    await app.get(EventrailPublisher).publish('chain.step', { next: 'twice' }, { id: 'first' });
    await waitFor(async () => (await redis.xlen(keys.stream(0))) === 3, 'three entries');
    await app.get(EventrailConsumers).settled();
    expect(handled).toEqual(['first', 'twice']);
    expect(app.get(EventrailConsumers).stats().chain).toMatchObject({ handled: 2, skippedDuplicates: 1 });
  });

  it('with dedupWindowMs appends an explicit id once per window and returns the first offset', async () => {
    const app = await start({ dedupWindowMs: 300, autoStart: false });
    const publisher = app.get(EventrailPublisher);
    const first = await publisher.publish('order.placed', { n: 1 }, { id: 'pay-1', key: 'k' });
    const again = await publisher.publish('order.placed', { n: 1 }, { id: 'pay-1', key: 'k' });
    expect(first.duplicate).toBe(false);
    expect(again).toEqual({ ...first, duplicate: true });
    const batch = await publisher.publishMany([
      { event: 'order.placed', data: { n: 1 }, id: 'pay-1', key: 'k' },
      { event: 'order.placed', data: { n: 2 }, id: 'pay-2', key: 'k' },
      { event: 'order.placed', data: { n: 2 }, id: 'pay-2', key: 'k' },
      { event: 'order.placed', data: { n: 3 }, key: 'k' }, // no id: never deduplicated
    ]);
    expect(batch.map((r) => r.duplicate)).toEqual([true, false, true, undefined]);
    expect(batch[2].offset).toBe(batch[1].offset);
    const stream = keys.stream(first.partition);
    expect(await redis.xlen(stream)).toBe(3);
    await waitFor(async () => (await redis.exists(keys.dedup(first.partition, 'pay-1'))) === 0, 'dedup window over');
    expect((await publisher.publish('order.placed', { n: 1 }, { id: 'pay-1', key: 'k' })).duplicate).toBe(false);
    expect(await redis.xlen(stream)).toBe(4);
  });

  it('does not commit a handler still running when shutdownTimeoutMs runs out; the next worker handles it', async () => {
    behaviour.slowMs = 400;
    // 'partition': on a host slow enough that the close outlasts the handler's 200 ms timeout, the
    // timed-out message is retried in place (not committed), where 'key' would park it and commit past it.
    const first = await start({ consumer: { shutdownTimeoutMs: 50, ordering: 'partition' } }, [Billing]);
    const published = await first.get(EventrailPublisher).publish('order.placed', { n: 7 });
    await waitFor(() => behaviour.started.includes(7), 'handler running');
    await first.close();
    apps = [];
    expect(await committed('billing')).not.toBe(published.offset);
    behaviour.slowMs = 0;
    const second = await start({}, [Billing]);
    await waitFor(async () => (await committed('billing')) === published.offset, 'handled after restart');
    expect(second.get(EventrailConsumers).stats().billing.handled).toBe(1);
  });
});
