import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { z } from 'zod';
import {
  BatchResult,
  defineEvent,
  EventrailAdmin,
  EventrailConsumers,
  EventrailMessage,
  EventrailModuleOptions,
  EventrailPublisher,
  InvalidHandlerError,
  OnEvent,
  PublishInput,
} from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { n: number };
type Messages = EventrailMessage<Data>[];

/** What the handlers below do and saw; reset per test. */
const world = {
  /** Every call: the ns of its messages and their attempt. */
  calls: [] as Array<{ ns: number[]; attempt: number }>,
  handled: [] as number[],
  /** Any call containing one of these throws. */
  poison: new Set<number>(),
  /** Reported in `failed` while they are in here; each report removes one from `reportsLeft`. */
  reported: new Set<number>(),
  reportsLeft: Infinity,
  /** Held calls wait for `release()`. */
  hold: false,
  inFlight: 0,
  release: () => undefined as void,
  held: Promise.resolve(),
  /** Single-handler calls of the mixed group. */
  singles: [] as number[],
};

function holdCalls(): void {
  world.hold = true;
  world.held = new Promise<void>((resolve) => (world.release = resolve));
}

const ns = (messages: Messages): number[] => messages.map((m) => m.data.n);
const FAST_RETRIES = { maxRetries: 2, retryBackoffMs: 2, retryBackoffMaxMs: 5 };

@Injectable()
class Ledger {
  @OnEvent('ledger.entry', { group: 'ledger', batch: { maxSize: 10 }, ...FAST_RETRIES })
  async book(messages: Messages): Promise<void | BatchResult<Data>> {
    world.calls.push({ ns: ns(messages), attempt: messages[0].attempt });
    world.inFlight++;
    try {
      if (world.hold) await world.held;
      if (messages.some((m) => world.poison.has(m.data.n))) throw new Error(`cannot book ${ns(messages).join(',')}`);
      const failed = messages
        .filter((m) => world.reported.has(m.data.n) && world.reportsLeft-- > 0)
        .map((message) => ({ message, error: new Error(`row ${message.data.n} refused`) }));
      for (const m of messages) if (!failed.some((f) => f.message === m)) world.handled.push(m.data.n);
      return failed.length > 0 ? { failed } : undefined;
    } finally {
      world.inFlight--;
    }
  }
}

@Injectable()
class Flusher {
  @OnEvent('ledger.entry', { group: 'flush', batch: { maxSize: 50, maxWaitMs: 2_000 } })
  book(messages: Messages): void {
    world.calls.push({ ns: ns(messages), attempt: messages[0].attempt });
  }
}

@Injectable()
class KeyedLedger {
  @OnEvent('ledger.entry', { group: 'keyed', concurrency: 4, batch: { maxSize: 3 } })
  async book(messages: Messages): Promise<void> {
    world.calls.push({ ns: ns(messages), attempt: messages[0].attempt });
    world.inFlight++;
    if (world.hold) await world.held;
    world.inFlight--;
    for (const m of messages) world.handled.push(m.data.n);
  }
}

@Injectable()
class Mixed {
  @OnEvent('ledger.entry', { group: 'mixed', batch: { maxSize: 10 } })
  book(messages: Messages): void {
    world.calls.push({ ns: ns(messages), attempt: messages[0].attempt });
    for (const m of messages) world.handled.push(m.data.n);
  }

  @OnEvent('ledger.closed', 'mixed')
  close(message: EventrailMessage<Data>): void {
    world.singles.push(message.data.n);
    world.handled.push(message.data.n);
  }
}

@Injectable()
class Hanger {
  @OnEvent('ledger.entry', { group: 'hang', batch: { maxSize: 10 }, handlerTimeoutMs: 100, ...FAST_RETRIES })
  async book(messages: Messages): Promise<void> {
    world.calls.push({ ns: ns(messages), attempt: messages[0].attempt });
    if (messages.some((m) => world.poison.has(m.data.n))) await new Promise(() => undefined);
    for (const m of messages) world.handled.push(m.data.n);
  }
}

@Injectable()
class TwoEvents {
  @OnEvent(['ledger.entry', 'ledger.closed'], { group: 'two', batch: { maxSize: 10 } })
  book(messages: Messages): void {
    world.calls.push({ ns: ns(messages), attempt: messages[0].attempt });
    for (const m of messages) world.handled.push(m.data.n);
  }
}

/** Two typed events of one batch handler, each with its own schema: small entries, and large closings. */
const SmallEntry = defineEvent('ledger.entry', z.object({ n: z.number().max(10) }));
const LargeClosing = defineEvent('ledger.closed', z.object({ n: z.number().min(100) }));

@Injectable()
class TwoTypedEvents {
  @OnEvent([SmallEntry, LargeClosing], { group: 'typed', batch: { maxSize: 10 } })
  book(messages: Messages): void {
    world.calls.push({ ns: ns(messages), attempt: messages[0].attempt });
  }
}

@Injectable()
class Clash {
  @OnEvent('ledger.entry', { group: 'ledger', batch: {} })
  book(): void {}

  @OnEvent('ledger.entry', 'ledger')
  single(): void {}
}

describe('batch handlers', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];

  const start = async (providers: unknown[], options: EventrailModuleOptions = {}): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, ...options }, providers as never[]);
    apps.push(app);
    return app;
  };
  /** Publishes before the consumers start, so the first read finds all of it. */
  const startWithBacklog = async (providers: unknown[], inputs: PublishInput[], options: EventrailModuleOptions = {}) => {
    const app = await start(providers, { autoStart: false, ...options });
    const published = await app.get(EventrailPublisher).publishMany(inputs);
    await app.get(EventrailConsumers).start();
    return { app, published };
  };
  const entries = (from: number, to: number, key = (n: number) => `k${n}`): PublishInput[] =>
    Array.from({ length: to - from + 1 }, (_, i) => ({ event: 'ledger.entry', data: { n: from + i }, key: key(from + i) }));
  const committed = (group: string): Promise<string | null> => redis.get(keys.offset(group, 0));

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('bat');
    keys = new EventrailKeys(prefix, 1);
    world.calls = [];
    world.handled = [];
    world.poison = new Set();
    world.reported = new Set();
    world.reportsLeft = Infinity;
    world.hold = false;
    world.inFlight = 0;
    world.singles = [];
  });
  afterEach(async () => {
    world.release();
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('gets consecutive messages in log order, at most maxSize per call, and commits past them', async () => {
    const { published } = await startWithBacklog([Ledger], entries(1, 25));
    await waitFor(async () => (await committed('ledger')) === published[24].offset, 'the offset past the 25 entries');
    expect(world.calls.map((c) => c.ns.length)).toEqual([10, 10, 5]);
    expect(world.calls.flatMap((c) => c.ns)).toEqual(entries(1, 25).map((e) => (e.data as Data).n));
    expect(world.calls.every((c) => c.attempt === 1)).toBe(true);
  });

  it('batches the events of a batch handler that takes several, interleaved, in one call', async () => {
    const inputs = entries(1, 6).map((input, i) => ({ ...input, event: i % 2 === 0 ? 'ledger.entry' : 'ledger.closed' }));
    const { published } = await startWithBacklog([TwoEvents], inputs);
    await waitFor(async () => (await committed('two')) === published[5].offset, 'the offset past the 6 entries');
    expect(world.calls).toEqual([{ ns: [1, 2, 3, 4, 5, 6], attempt: 1 }]);
  });

  it("checks each message of a batch against its own event's schema when the batch handler takes several typed events", async () => {
    // Published by name, so the publish side does not check: what a producer in another language may write.
    const inputs: PublishInput[] = [
      { event: 'ledger.entry', data: { n: 1 } },
      { event: 'ledger.closed', data: { n: 200 } },
      { event: 'ledger.entry', data: { n: 300 } }, // too large for an entry
      { event: 'ledger.closed', data: { n: 2 } }, // too small for a closing
    ];
    const { app, published } = await startWithBacklog([TwoTypedEvents], inputs);
    await waitFor(async () => (await committed('typed')) === published[3].offset, 'the offset past the 4 entries');
    expect(world.calls).toEqual([{ ns: [1, 200], attempt: 1 }]);
    const letters = await app.get(EventrailAdmin).deadLetters('typed');
    expect(letters.map((l) => [l.reason, l.offset]).sort()).toEqual(
      [
        ['invalid', published[2].offset],
        ['invalid', published[3].offset],
      ].sort(),
    );
  });

  it('waits up to maxWaitMs for a fuller batch, then calls with what is there', async () => {
    const app = await start([Flusher]);
    const publisher = app.get(EventrailPublisher);
    // Three appends, each its own round trip: the first read brings one, the blocking top-up reads the others.
    for (const input of entries(1, 3)) await publisher.publish(input.event, input.data, { key: input.key });
    await waitFor(() => world.calls.length > 0, 'the batch handler called');
    expect(world.calls[0].ns).toEqual([1, 2, 3]);
    // A lone message is not held back past maxWaitMs: the call comes with one message, short of maxSize.
    await publisher.publish('ledger.entry', { n: 4 });
    await waitFor(() => world.calls.length > 1, 'the lone message flushed');
    expect(world.calls[1].ns).toEqual([4]);
  });

  it('retries a failing batch whole, then splits it so that only the poison message is dead-lettered', async () => {
    world.poison.add(3);
    const { app, published } = await startWithBacklog([Ledger], entries(1, 5), { consumer: { ordering: 'partition' } });
    await waitFor(async () => (await committed('ledger')) === published[4].offset, 'the offset past the batch');
    // The batch: its first try and maxRetries: 2; then each message alone, in order.
    expect(world.calls).toEqual([
      { ns: [1, 2, 3, 4, 5], attempt: 1 },
      { ns: [1, 2, 3, 4, 5], attempt: 2 },
      { ns: [1, 2, 3, 4, 5], attempt: 3 },
      { ns: [1], attempt: 4 },
      { ns: [2], attempt: 4 },
      { ns: [3], attempt: 4 },
      { ns: [4], attempt: 4 },
      { ns: [5], attempt: 4 },
    ]);
    expect(world.handled).toEqual([1, 2, 4, 5]);
    const letters = await app.get(EventrailAdmin).deadLetters('ledger');
    expect(letters).toHaveLength(1);
    expect(letters[0]).toMatchObject({
      eventId: published[2].id,
      data: { n: 3 },
      reason: 'retries-exhausted',
      attempts: 4,
      error: { message: 'cannot book 3' },
    });
    expect(app.get(EventrailConsumers).stats().ledger).toEqual({ handled: 4, deadLettered: 1, skippedDuplicates: 0 });
  });

  it('sends only the messages reported in `failed` down the retry path, one by one', async () => {
    world.reported = new Set([2, 4]);
    world.reportsLeft = 3; // 2 and 4 in the batch, then 2 once more alone; its next retry succeeds
    const { app, published } = await startWithBacklog([Ledger], entries(1, 5), { consumer: { ordering: 'partition' } });
    await waitFor(async () => (await committed('ledger')) === published[4].offset, 'the offset past the batch');
    expect(world.calls).toEqual([
      { ns: [1, 2, 3, 4, 5], attempt: 1 },
      { ns: [2], attempt: 2 },
      { ns: [2], attempt: 3 },
      { ns: [4], attempt: 2 },
    ]);
    expect(world.handled).toEqual([1, 3, 5, 2, 4]);
    expect(await app.get(EventrailAdmin).deadLetterCount('ledger')).toBe(0);
  });

  it('dead-letters a reported message that keeps failing alone, with the usual reason and attempts', async () => {
    world.reported = new Set([2]);
    const { app, published } = await startWithBacklog([Ledger], entries(1, 3), { consumer: { ordering: 'partition' } });
    await waitFor(async () => (await committed('ledger')) === published[2].offset, 'the offset past the batch');
    const letters = await app.get(EventrailAdmin).deadLetters('ledger');
    expect(letters.map((l) => ({ n: (l.data as Data).n, reason: l.reason, attempts: l.attempts }))).toEqual([
      { n: 2, reason: 'retries-exhausted', attempts: 3 },
    ]);
    expect(world.handled).toEqual([1, 3]);
  });

  it('with concurrency, runs batches of disjoint keys at once and keeps per-key order', async () => {
    // Three runs of three entries, each run one key: three batches with no key in common.
    const blocks = entries(1, 9, (n) => `account-${Math.ceil(n / 3)}`);
    holdCalls();
    const { published } = await startWithBacklog([KeyedLedger], blocks);
    await waitFor(
      () => world.inFlight === 3,
      () => `three batches in flight at once (calls: ${JSON.stringify(world.calls)})`,
    );
    world.release();
    await waitFor(async () => (await committed('keyed')) === published[8].offset, 'the offset past the entries');
    expect(world.calls.map((c) => c.ns).sort((a, b) => a[0] - b[0])).toEqual([
      [1, 2, 3],
      [4, 5, 6],
      [7, 8, 9],
    ]);
  });

  it('with concurrency, holds back a batch sharing a key with a running one', async () => {
    // Keys interleave: every batch of three shares keys with the one before it.
    const interleaved = entries(1, 9, (n) => `account-${n % 2}`);
    holdCalls();
    const { published } = await startWithBacklog([KeyedLedger], interleaved);
    await waitFor(() => world.inFlight === 1, 'the first batch in flight');
    // Shows the others wait for it: they cannot start while it holds (checked again after its release).
    expect(world.calls).toHaveLength(1);
    world.release();
    await waitFor(async () => (await committed('keyed')) === published[8].offset, 'the offset past the entries');
    expect(world.calls.map((c) => c.ns)).toEqual([
      [1, 2, 3],
      [4, 5, 6],
      [7, 8, 9],
    ]);
    for (const key of [0, 1]) {
      const ofKey = world.handled.filter((n) => n % 2 === key);
      expect(ofKey).toEqual([...ofKey].sort((a, b) => a - b));
    }
  });

  it('skips events already done with idempotency, in the batch and across batches', async () => {
    const inputs = entries(1, 4).map((e) => ({ ...e, id: `entry-${(e.data as Data).n}` }));
    // entry-2 twice in one read, entry-1 again later in another.
    const { app, published } = await startWithBacklog([Ledger], [...inputs.slice(0, 2), { ...inputs[1] }, ...inputs.slice(2)], {
      consumer: { enableIdempotency: true },
    });
    await waitFor(async () => (await committed('ledger')) === published[4].offset, 'the offset past the first five');
    const again = await app.get(EventrailPublisher).publish('ledger.entry', { n: 1 }, { id: 'entry-1', key: 'k1' });
    await waitFor(async () => (await committed('ledger')) === again.offset, 'the offset past the replay');
    expect(world.handled).toEqual([1, 2, 3, 4]);
    expect(app.get(EventrailConsumers).stats().ledger).toMatchObject({ handled: 4, skippedDuplicates: 2 });
  });

  it('mixes a batch handler and a single handler of different events in one group, in log order', async () => {
    const inputs: PublishInput[] = [
      ...entries(1, 3),
      { event: 'ledger.closed', data: { n: 4 } },
      ...entries(5, 6),
      { event: 'other.event', data: { n: 99 } },
      ...entries(7, 7),
    ];
    const { published } = await startWithBacklog([Mixed], inputs);
    await waitFor(async () => (await committed('mixed')) === published[published.length - 1].offset, 'the offset past everything');
    // The single-handled event ends a batch; an event the group does not handle does not.
    expect(world.calls.map((c) => c.ns)).toEqual([
      [1, 2, 3],
      [5, 6, 7],
    ]);
    expect(world.singles).toEqual([4]);
    expect(world.handled).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it('replays a dead letter to its group as a one-message batch', async () => {
    world.poison.add(2);
    const { app, published } = await startWithBacklog([Ledger], entries(1, 3), { consumer: { ordering: 'partition' } });
    await waitFor(async () => (await committed('ledger')) === published[2].offset, 'the offset past the batch');
    world.poison.clear();
    world.calls = [];
    const admin = app.get(EventrailAdmin);
    const [letter] = await admin.deadLetters('ledger');
    await admin.replayDeadLetters('ledger', [letter.id]);
    await waitFor(() => world.handled.includes(2), 'the replayed entry handled');
    expect(world.calls).toEqual([{ ns: [2], attempt: 1 }]);
  });

  it('fails a call that outlives handlerTimeoutMs like a throw: whole-batch retries, then only the hanging message dead-lettered', async () => {
    world.poison.add(2);
    const { app, published } = await startWithBacklog([Hanger], entries(1, 3), { consumer: { ordering: 'partition' } });
    await waitFor(async () => (await committed('hang')) === published[2].offset, 'the offset past the batch', 30_000);
    expect(world.calls.map((c) => c.ns)).toEqual([[1, 2, 3], [1, 2, 3], [1, 2, 3], [1], [2], [3]]);
    const [letter, ...others] = await app.get(EventrailAdmin).deadLetters('hang');
    expect(others).toEqual([]);
    expect(letter).toMatchObject({ data: { n: 2 }, reason: 'retries-exhausted', error: { name: 'HandlerTimeoutError' } });
    expect(world.handled).toEqual([1, 3]);
  });

  it('reports metrics per message: processed for each one handled, errors for failed calls and reported messages', async () => {
    const processed: string[] = [];
    const errors: Array<{ attempt: number; message: string }> = [];
    const deadLettered: string[] = [];
    world.reported = new Set([2]);
    world.reportsLeft = 1;
    const { published } = await startWithBacklog([Ledger], entries(1, 3), {
      consumer: { ordering: 'partition' },
      metrics: {
        onMessageProcessed: (group, event) => processed.push(`${group}:${event}`),
        onHandlerError: (_group, _event, error, attempt) => errors.push({ attempt, message: (error as Error).message }),
        onMessageDeadLettered: (_group, _event, offset) => deadLettered.push(offset),
      },
    });
    await waitFor(async () => (await committed('ledger')) === published[2].offset, 'the offset past the batch');
    expect(processed).toEqual(['ledger:ledger.entry', 'ledger:ledger.entry', 'ledger:ledger.entry']);
    expect(errors).toEqual([{ attempt: 1, message: 'row 2 refused' }]);
    expect(deadLettered).toEqual([]);
  });

  it('refuses a batch handler next to another handler of the same event in its group, at startup', async () => {
    await expect(start([Clash])).rejects.toThrow(InvalidHandlerError);
    await expect(start([Clash])).rejects.toThrow(/event "ledger.entry" in group "ledger" is also handled by Clash.book/);
  });

  it('refuses bad batch options with the option named', async () => {
    @Injectable()
    class BadBatch {
      @OnEvent('ledger.entry', { group: 'bad', batch: { maxSize: 0 } })
      book(): void {}
    }
    @Injectable()
    class MisspeltBatch {
      @OnEvent('ledger.entry', { group: 'bad', batch: { maxWait: 10 } as never })
      book(): void {}
    }
    await expect(start([BadBatch])).rejects.toThrow(/BadBatch\.book: .*batch\.maxSize: got 0/);
    await expect(start([MisspeltBatch])).rejects.toThrow(/did you mean maxWaitMs\?/);
  });
});
