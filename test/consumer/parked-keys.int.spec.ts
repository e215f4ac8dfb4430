import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailModuleOptions, EventrailPublisher, EventrailRetention, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { monitorOf } from '../support/monitor';

type Data = { key: string; n: number };

/** The handlers' dependency: keys in `down` fail; every call and every success is recorded. */
const dependency = {
  down: new Set<string>(),
  calls: [] as string[],
  handled: [] as string[],
  attempts: [] as Array<[string, number]>,
  call(message: EventrailMessage<Data>): void {
    const name = `${message.data.key}${message.data.n}`;
    this.calls.push(name);
    this.attempts.push([name, message.attempt]);
    if (this.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    this.handled.push(name);
  },
};

const FAST = {
  lockTtlMs: 2_000,
  heartbeatTtlMs: 2_000,
  maxRetries: 1,
  retryBackoffMs: 5,
  retryBackoffMaxMs: 10,
  redelivery: { delayMs: 40, factor: 2, maxDelayMs: 200, maxAgeMs: 600_000 },
} as const;

@Injectable()
class KeyOrdered {
  @OnEvent('account.changed', { group: 'by-key', ordering: 'key', ...FAST })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

@Injectable()
class Unordered {
  @OnEvent('account.changed', { group: 'unordered', ordering: 'unordered', ...FAST })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

@Injectable()
class ShortBudget {
  @OnEvent('account.changed', { group: 'short', ordering: 'key', ...FAST, redelivery: { ...FAST.redelivery, maxAgeMs: 400 } })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

/** Parked heads wait a long time: an operator's retry or give-up is what moves them. */
@Injectable()
class SlowTiers {
  @OnEvent('account.changed', {
    group: 'slow',
    ordering: 'key',
    ...FAST,
    redelivery: { ...FAST.redelivery, delayMs: 600_000, maxDelayMs: 600_000 },
  })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

/** Default lease and heartbeat TTLs: no timer fires while a test watches a few batches go by. */
const QUIET = { maxRetries: 1, retryBackoffMs: 5 } as const;

@Injectable()
class QuietByKey {
  @OnEvent('account.changed', { group: 'quiet', ordering: 'key', ...QUIET })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

@Injectable()
class QuietByPartition {
  @OnEvent('account.changed', { group: 'quiet', ordering: 'partition', ...QUIET })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

@Injectable()
class BatchByKey {
  @OnEvent('account.changed', { group: 'batches', ordering: 'key', batch: { maxSize: 10 }, ...FAST })
  handle(messages: EventrailMessage<Data>[]): void {
    // All or nothing, as a transaction would: a batch with a message of a key that is down records nothing.
    const down = messages.find((m) => dependency.down.has(m.data.key));
    if (down) throw new Error(`${down.data.key} is down`);
    for (const message of messages) dependency.call(message);
  }
}

@Injectable()
class PartitionOrdered {
  @OnEvent('account.changed', { group: 'by-partition', ordering: 'partition', ...FAST, maxRetries: 1_000 })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

describe('parked keys: a failing message holds back only its key', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];

  const start = async (providers: unknown[], options: EventrailModuleOptions = {}): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, ...options }, providers as never[]);
    apps.push(app);
    return app;
  };
  const publish = (app: INestApplicationContext, names: string[]) =>
    app
      .get(EventrailPublisher)
      .publishMany(names.map((name) => ({ event: 'account.changed', data: { key: name[0], n: Number(name.slice(1)) }, key: name[0] })));
  const parkedFields = async (group: string): Promise<Record<string, { ids: string[] }>> => {
    const fields = await redis.hgetall(keys.recovery(group, 0));
    const lines: Record<string, { ids: string[] }> = {};
    for (const [field, value] of Object.entries(fields)) if (field.startsWith('park:')) lines[field] = JSON.parse(value);
    return lines;
  };
  const handledOf = (key: string) => dependency.handled.filter((name) => name.startsWith(key));

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked');
    keys = new EventrailKeys(prefix, 1);
    Object.assign(dependency, { down: new Set(), calls: [], handled: [], attempts: [] });
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it("'key': other keys go on while one is down; the parked key is handled in order once it is back", async () => {
    const app = await start([KeyOrdered]);
    dependency.down.add('A');
    const published = await publish(app, ['A1', 'B1', 'A2', 'C1', 'B2', 'A3', 'C2']);
    await waitFor(() => handledOf('B').length === 2 && handledOf('C').length === 2, 'B and C handled while A is down');
    // The offset moved past everything: A's messages wait in their line, not in the partition.
    await waitFor(async () => (await redis.get(keys.offset('by-key', 0))) === published[6].offset, 'the offset at the end');
    const lines = await parkedFields('by-key');
    expect(Object.keys(lines)).toEqual(['park:k:A']);
    expect(lines['park:k:A'].ids).toEqual([published[0].offset, published[2].offset, published[5].offset]);
    expect(await redis.hget(keys.recovery('by-key', 0), 'parkedFloor')).toBe(published[0].offset);
    // Only A1, the head, was tried: A2 and A3 waited behind it.
    expect(new Set(dependency.calls.filter((c) => c.startsWith('A')))).toEqual(new Set(['A1']));
    // Later messages of the parked key wait too, even from a later read.
    await publish(app, ['A4', 'B3']);
    await waitFor(() => handledOf('B').length === 3, 'B3 handled');

    dependency.down.delete('A');
    await waitFor(() => handledOf('A').length === 4, 'A handled once back');
    expect(handledOf('A')).toEqual(['A1', 'A2', 'A3', 'A4']);
    await waitFor(async () => Object.keys(await parkedFields('by-key')).length === 0, 'the line released in Redis');
    expect(await redis.hget(keys.recovery('by-key', 0), 'parkedFloor')).toBeNull();
    expect(await app.get(EventrailAdmin).deadLetterCount('by-key')).toBe(0);
  });

  it("'unordered': the failing message is parked on its own line; it comes back through its tiers", async () => {
    const app = await start([Unordered]);
    dependency.down.add('A');
    const published = await publish(app, ['A1', 'B1']);
    await waitFor(() => handledOf('B').length === 1, 'B1 handled');
    const lines = await parkedFields('unordered');
    expect(Object.keys(lines)).toEqual([`park:m:${published[0].offset}`]);
    expect(lines[`park:m:${published[0].offset}`].ids).toEqual([published[0].offset]);
    dependency.down.delete('A');
    await waitFor(() => handledOf('A').length === 1, 'A1 handled at its redelivery');
    await waitFor(async () => Object.keys(await parkedFields('unordered')).length === 0, 'the line released');
  });

  it("'unordered': a later message of a parked key is handled before the parked one", async () => {
    const app = await start([Unordered]);
    dependency.down.add('A');
    await publish(app, ['A1']);
    await waitFor(async () => Object.keys(await parkedFields('unordered')).length === 1, 'A1 parked');
    // Make A1 keep failing while A2 succeeds: only A1's name is down.
    dependency.down.delete('A');
    const original = dependency.call.bind(dependency);
    let a1Calls = 0;
    dependency.call = (message) => {
      if (message.data.key === 'A' && message.data.n === 1 && a1Calls++ < 3) throw new Error('A1 still fails');
      original(message);
    };
    try {
      await publish(app, ['A2']);
      await waitFor(() => handledOf('A').length === 2, 'A1 and A2 handled');
      expect(handledOf('A')).toEqual(['A2', 'A1']);
    } finally {
      dependency.call = original;
    }
  });

  it("'key': a head failing for redelivery.maxAgeMs is dead-lettered, and the next message of its key becomes the head", async () => {
    const app = await start([ShortBudget]);
    dependency.down.add('A');
    const published = await publish(app, ['A1', 'A2', 'B1']);
    const admin = app.get(EventrailAdmin);
    await waitFor(async () => (await admin.deadLetterCount('short')) >= 1, 'A1 dead-lettered');
    const [letter] = await admin.deadLetters('short');
    expect(letter).toMatchObject({ eventId: published[0].id, reason: 'retries-exhausted', error: { message: 'A is down' } });
    dependency.down.delete('A');
    await waitFor(() => handledOf('A').length === 1, 'A2 handled');
    expect(handledOf('A')).toEqual(['A2']);
    expect(handledOf('B')).toEqual(['B1']);
  });

  it("'partition': a failing message holds its whole partition, as before", async () => {
    const app = await start([PartitionOrdered]);
    dependency.down.add('A');
    await publish(app, ['A1', 'B1']);
    await waitFor(() => dependency.calls.filter((c) => c === 'A1').length >= 5, 'A1 retried in place');
    expect(handledOf('B')).toEqual([]);
    expect(Object.keys(await parkedFields('by-partition'))).toEqual([]);
    dependency.down.delete('A');
    await waitFor(() => dependency.handled.length === 2, 'both handled');
    expect(dependency.handled).toEqual(['A1', 'B1']);
  });

  it("'key': a worker that takes the partition over goes on with the parked line where the last one left it", async () => {
    const first = await start([KeyOrdered]);
    dependency.down.add('A');
    const published = await publish(first, ['A1', 'A2', 'B1']);
    await waitFor(async () => (await parkedFields('by-key'))['park:k:A']?.ids.length === 2, 'A1 and A2 parked');
    await waitFor(async () => (await redis.get(keys.offset('by-key', 0))) === published[2].offset, 'the offset at the end');
    await first.close();
    apps = apps.filter((app) => app !== first);
    const callsBefore = dependency.calls.length;

    dependency.down.delete('A');
    const second = await start([KeyOrdered]);
    await waitFor(() => handledOf('A').length === 2, 'A handled by the new owner');
    expect(handledOf('A')).toEqual(['A1', 'A2']);
    // B1 was done before the takeover: the new owner did not handle it again, nor anything but the line.
    expect(dependency.calls.slice(callsBefore)).toEqual(['A1', 'A2']);
    await waitFor(async () => Object.keys(await parkedFields('by-key')).length === 0, 'the line released');
    await second.close();
    apps = apps.filter((app) => app !== second);
  });

  it('lists parked keys, retries them on demand and gives a head up on demand', async () => {
    const app = await start([SlowTiers]);
    const admin = app.get(EventrailAdmin);
    dependency.down.add('A');
    dependency.down.add('B');
    const published = await publish(app, ['A1', 'A2', 'B1', 'C1']);
    // Parked at the first failure, then tried once more at the quick tier (maxRetries 1) before the slow ones.
    await waitFor(async () => {
      const now = await admin.parkedKeys('slow');
      return now.length === 2 && now.every((p) => p.attempts === 2);
    }, 'A and B parked, past their quick tier');
    const parked = await admin.parkedKeys('slow');
    expect(parked.map((p) => ({ key: p.key, offset: p.offset, eventId: p.eventId, count: p.count, event: p.event }))).toEqual([
      { key: 'A', offset: published[0].offset, eventId: published[0].id, count: 2, event: 'account.changed' },
      { key: 'B', offset: published[2].offset, eventId: published[2].id, count: 1, event: 'account.changed' },
    ]);
    for (const p of parked) {
      expect(p.partition).toBe(0);
      expect(p.error).toMatch(/^Error: [AB] is down$/);
      expect(p.firstFailedAt).toBeInstanceOf(Date);
      // The first tier of 10 min, with jitter: at least half of it ahead.
      expect(p.nextAttemptAt.getTime() - Date.now()).toBeGreaterThan(200_000);
    }
    expect(handledOf('C')).toEqual(['C1']);

    // Retry now: B is back and goes at once, not in 10 minutes; A stays parked.
    dependency.down.delete('B');
    expect(await admin.retryParked('slow', { key: 'B' })).toBe(1);
    await waitFor(() => handledOf('B').length === 1, 'B1 handled after the retry');
    await waitFor(async () => (await admin.parkedKeys('slow')).length === 1, "B's line released");

    // Give up A's head: A1 is dead-lettered, A2 (its next message) is tried at once and handled.
    dependency.down.delete('A');
    const callsOfA1 = dependency.calls.filter((c) => c === 'A1').length;
    expect(await admin.giveUpParked('slow', { key: 'A' })).toBe(1);
    await waitFor(() => handledOf('A').length === 1, 'A2 handled after the give-up');
    expect(handledOf('A')).toEqual(['A2']);
    expect(dependency.calls.filter((c) => c === 'A1').length).toBe(callsOfA1);
    const [letter] = await admin.deadLetters('slow');
    expect(letter).toMatchObject({ eventId: published[0].id, reason: 'retries-exhausted' });
    expect(letter.error.message).toMatch(/given up by an operator.*A is down/);
    await waitFor(async () => (await admin.parkedKeys('slow')).length === 0, 'nothing parked');
    expect(await admin.giveUpParked('slow', { key: 'A' })).toBe(0);
  });

  it('retention never trims a parked message; once its line is released it may', async () => {
    const app = await start([KeyOrdered], { retention: { enabled: false, maxLen: 1, approximate: false } });
    dependency.down.add('A');
    const published = await publish(app, ['B1', 'A1', 'B2', 'B3', 'B4']);
    await waitFor(async () => (await redis.get(keys.offset('by-key', 0))) === published[4].offset, 'the offset at the end');
    const result = await app.get(EventrailRetention).runOnce();
    expect(result.partitions[0].heldBackBy).toEqual(['by-key']);
    // B1 (before the parked A1) went; A1 and everything after it stayed.
    const left = (await redis.xrange(keys.stream(0), '-', '+')).map(([id]) => id);
    expect(left).toEqual(published.slice(1).map((r) => r.offset));

    dependency.down.delete('A');
    await waitFor(async () => (await app.get(EventrailAdmin).parkedKeys('by-key')).length === 0, 'A released');
    await app.get(EventrailRetention).runOnce();
    expect(await redis.xlen(keys.stream(0))).toBe(1);
  });

  it('costs nothing on the happy path: no command per batch more than partition ordering', async () => {
    const BATCHES = 30;
    const commandsOf = async (provider: unknown): Promise<Map<string, number>> => {
      const app = await start([provider]);
      const [first] = await publish(app, ['X0']);
      // X0's commit is out before the window opens, so every commit the window sees is one of its batches'.
      await waitFor(async () => (await redis.get(keys.offset('quiet', first.partition))) === first.offset, 'the first committed');
      // The test's own reads of the offset are left out: how often it polls is the host's speed, not the consumer's.
      const own = /addr=(\S+)/.exec(String(await redis.client('INFO')))?.[1];
      const monitor = await monitorOf(redis);
      const counts = new Map<string, number>();
      monitor.on('monitor', (_time: string, args: string[], source: string) => {
        if (source === 'lua' || source === own || !args.some((a) => a.includes(prefix))) return;
        const name = args[0].toLowerCase();
        counts.set(name, (counts.get(name) ?? 0) + 1);
      });
      // One event at a time, each handled before the next: a batch each.
      let last!: { partition: number; offset: string };
      for (let i = 1; i <= BATCHES; i++) {
        [last] = await publish(app, [`X${i}`]);
        await waitFor(() => dependency.handled.length === i + 1, `X${i} handled`);
      }
      // Commits merge by time (one per 25 ms at most): a fast host handles the 30 batches between two of
      // them, so the window waits for the last one, and holds a commit for either ordering.
      await waitFor(async () => (await redis.get(keys.offset('quiet', last.partition))) === last.offset, 'the last batch committed');
      monitor.disconnect();
      await app.close();
      apps = apps.filter((a) => a !== app);
      dependency.handled = [];
      await deletePrefix(redis, prefix);
      return counts;
    };
    const byPartition = await commandsOf(QuietByPartition);
    const byKey = await commandsOf(QuietByKey);
    expect([...byKey.keys()].sort()).toEqual([...byPartition.keys()].sort());
    expect(byKey.has('hgetall')).toBe(false);
    // Commits merge by time: 1 to 30 of them on either side, as fast as the host is, so the counts are not
    // compared one for one. A command more per batch comes on top of at least one: over both BATCHES and what
    // partition ordering sent.
    for (const [name, count] of byKey)
      expect({ name, count }).toEqual({ name, count: Math.min(count, Math.max(byPartition.get(name) ?? 0, BATCHES)) });
    // A read and a commit per batch at least: the window saw the batches.
    expect([...byKey.values()].reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(BATCHES);
  });

  it('numbers attempts on across redeliveries', async () => {
    const app = await start([KeyOrdered]);
    dependency.down.add('A');
    await publish(app, ['A1']);
    await waitFor(() => dependency.attempts.length >= 5, 'A1 tried five times');
    dependency.down.delete('A');
    await waitFor(() => handledOf('A').length === 1, 'A1 handled');
    const numbers = dependency.attempts.map(([, attempt]) => attempt);
    expect(numbers).toEqual(numbers.map((_, i) => i + 1));
  });

  it('batch handlers: a message that fails alone parks its key; the rest of the batch and later batches go on', async () => {
    const app = await start([BatchByKey]);
    dependency.down.add('A');
    await publish(app, ['B1', 'A1', 'C1', 'A2', 'B2']);
    await waitFor(() => handledOf('B').length === 2 && handledOf('C').length === 1, 'B and C handled');
    await waitFor(async () => (await parkedFields('batches'))['park:k:A']?.ids.length === 2, 'A1 and A2 parked');
    await publish(app, ['A3', 'C2']);
    await waitFor(() => handledOf('C').length === 2, 'C2 handled while A is parked');
    dependency.down.delete('A');
    await waitFor(() => handledOf('A').length === 3, 'A handled once back');
    expect(handledOf('A')).toEqual(['A1', 'A2', 'A3']);
    expect(await app.get(EventrailAdmin).deadLetterCount('batches')).toBe(0);
  });
});
