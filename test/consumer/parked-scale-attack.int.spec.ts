import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailModuleOptions, EventrailPublisher, EventrailRetention, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { compareStreamIds } from '../../lib/wire/stream-id';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { key: string; n: number };
const GROUP = 'scale-attack';

/** Fails a message as many times as `failures` says (per name), records calls and first handlings. */
const dependency = {
  failures: new Map<string, number>(),
  calls: [] as string[],
  handled: [] as string[],
  call(message: EventrailMessage<Data>): Promise<void> {
    const name = `${message.data.key}:${message.data.n}`;
    this.calls.push(name);
    const left = this.failures.get(name) ?? 0;
    if (left > 0) {
      this.failures.set(name, left - 1);
      return Promise.reject(new Error(`${name} is down`));
    }
    this.handled.push(name);
    return Promise.resolve();
  },
};

// Quick tiers, so lines cycle (park, redeliver, release, park again) many times in a few seconds.
const TIERS = {
  maxRetries: 0,
  retryBackoffMs: 5,
  retryBackoffMaxMs: 10,
  redelivery: { delayMs: 20, factor: 2, maxDelayMs: 80, maxAgeMs: 600_000 },
} as const;

@Injectable()
class ByKeyChunked {
  @OnEvent('account.changed', { group: GROUP, ordering: 'key', concurrency: 4, batchSize: 3, ...TIERS })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

@Injectable()
class UnorderedChunked {
  @OnEvent('account.changed', { group: GROUP, ordering: 'unordered', concurrency: 4, batchSize: 3, ...TIERS })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

/** Parks and holds: the first redelivery ten minutes away, so lines stay as parked until another member takes them. */
@Injectable()
class UnorderedHolding {
  @OnEvent('account.changed', {
    group: GROUP,
    ordering: 'unordered',
    concurrency: 4,
    batchSize: 3,
    ...TIERS,
    redelivery: { ...TIERS.redelivery, delayMs: 600_000, maxDelayMs: 600_000 },
  })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

@Injectable()
class ByPartition {
  @OnEvent('account.changed', { group: GROUP, ordering: 'partition', batchSize: 3, ...TIERS })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

/**
 * Attacks on the parked floor (the oldest parked id, which the owner now sends with each commit that
 * changes a line, and which retention keeps) while lines cycle, drain in chunks, re-park, and merge.
 */
describe('parked keys under attack: the floor while lines cycle, drain in chunks and merge', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];

  const retention = { enabled: false, maxLen: 0, approximate: false };
  const start = async (provider: unknown, options: Partial<EventrailModuleOptions> = {}): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, retention, ...options }, [provider as never]);
    apps.push(app);
    return app;
  };
  const stop = async (app: INestApplicationContext): Promise<void> => {
    apps = apps.filter((a) => a !== app);
    await app.close();
  };
  const publish = (app: INestApplicationContext, names: Array<[string, number]>) =>
    app.get(EventrailPublisher).publishMany(names.map(([key, n]) => ({ event: 'account.changed', data: { key, n }, key })));
  /** Round robin over the keys: the heads of the lines interleave in the log. */
  const interleaved = (keyNames: string[], from: number, to: number): Array<[string, number]> => {
    const names: Array<[string, number]> = [];
    for (let n = from; n <= to; n++) for (const key of keyNames) names.push([key, n]);
    return names;
  };
  const firstHandlings = (key: string): number[] => [
    ...new Set(dependency.handled.filter((name) => name.split(':')[0] === key).map((name) => Number(name.split(':')[1]))),
  ];

  /**
   * One atomic look at the recovery hash: the stored floor must be at or before the first id of every
   * stored line, and present while any line is. Returns a description of what is wrong, or undefined.
   */
  const floorBreach = async (): Promise<string | undefined> => {
    const fields = await redis.hgetall(keys.recovery(GROUP, 0));
    let oldest: string | undefined;
    for (const [field, value] of Object.entries(fields)) {
      if (!field.startsWith('park:')) continue;
      const first = (JSON.parse(value) as { ids: string[] }).ids[0];
      if (!oldest || compareStreamIds(first, oldest) < 0) oldest = first;
    }
    const floor = fields.parkedFloor;
    if (oldest === undefined) return undefined;
    if (!floor) return `no floor stored while ${oldest} is parked`;
    if (compareStreamIds(floor, oldest) > 0) return `floor ${floor} above the parked ${oldest}`;
    return undefined;
  };

  /** Trims to the floor (maxLen 0) over and over and samples the floor, until `done`; returns the breaches seen and the rounds. */
  const trimWhile = async (
    app: INestApplicationContext,
    done: () => boolean,
  ): Promise<{ breaches: string[]; rounds: number; trimmed: number }> => {
    const breaches: string[] = [];
    let rounds = 0;
    let trimmed = 0;
    const deadline = Date.now() + 30_000;
    while (!done() && Date.now() < deadline) {
      const breach = await floorBreach();
      if (breach) breaches.push(breach);
      const result = await app.get(EventrailRetention).runOnce();
      for (const partition of result.partitions) trimmed += partition.trimmed;
      rounds++;
      await new Promise((resolve) => setImmediate(resolve));
    }
    return { breaches, rounds, trimmed };
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked-scale-attack');
    keys = new EventrailKeys(prefix, 1);
    Object.assign(dependency, { failures: new Map(), calls: [], handled: [] });
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it.each([40, 600])(
    "'key', batchSize 3: %i keys with interleaved heads park, drain in chunks and park again inside a chunk while retention trims to the floor; every message first handled in key order",
    async (keyCount) => {
      const app = await start(ByKeyChunked);
      const keyNames = Array.from({ length: keyCount }, (_, i) => `K${i}`);
      const perKey = 8;
      for (const [i, key] of keyNames.entries()) {
        if (i % 4 === 3) continue; // a healthy key among every three failing ones
        dependency.failures.set(`${key}:1`, 2); // the head parks and is redelivered twice
        dependency.failures.set(`${key}:3`, 1); // fails inside the first drained chunk: released and parked again in one write
        dependency.failures.set(`${key}:7`, 1 + (i % 3)); // fails in a later chunk
      }
      await publish(app, interleaved(keyNames, 1, 4));
      const total = keyNames.length * perKey;
      const allHandled = () => new Set(dependency.handled).size === total;
      const trimming = trimWhile(app, allHandled);
      await publish(app, interleaved(keyNames, 5, perKey));
      const { breaches, rounds, trimmed } = await trimming;
      await waitFor(allHandled, () => `every message handled (${new Set(dependency.handled).size} of ${total})`, 30_000);
      expect(rounds).toBeGreaterThan(5);
      expect(trimmed).toBeGreaterThan(0); // retention did trim while lines cycled
      expect(breaches).toEqual([]);
      for (const key of keyNames) expect([key, firstHandlings(key)]).toEqual([key, [1, 2, 3, 4, 5, 6, 7, 8]]);
      expect(await app.get(EventrailAdmin).deadLetterCount(GROUP)).toBe(0);
      await waitFor(
        async () => (await redis.hget(keys.recovery(GROUP, 0), 'parkedFloor')) === null,
        'the floor removed once nothing is parked',
      );
    },
    90_000,
  );

  it("'unordered' parks one key's messages as lines of their own, a 'key' member merges them while retention trims to the floor: first handled in log order, nothing lost", async () => {
    const holding = await start(UnorderedHolding);
    const keyNames = ['A', 'B', 'C', 'D', 'E', 'F'];
    // Every message of A-E fails once (each parks as its own line), F is healthy and interleaved.
    for (const key of keyNames.slice(0, 5)) for (let n = 1; n <= 6; n++) dependency.failures.set(`${key}:${n}`, 1);
    await publish(holding, interleaved(keyNames, 1, 6));
    await waitFor(
      async () => Object.keys(await redis.hgetall(keys.recovery(GROUP, 0))).filter((f) => f.startsWith('park:m:')).length === 30,
      'thirty lines parked by the unordered member',
    );
    await holding.get(EventrailRetention).runOnce();
    expect(await floorBreach()).toBeUndefined();
    await stop(holding);
    // The key member merges each key's six lines into one; they fail once more on the way (the oldest head keeps its tier).
    for (const key of keyNames.slice(0, 5)) dependency.failures.set(`${key}:2`, 1);
    const byKey = await start(ByKeyChunked);
    // The merged line keeps the oldest head's next try (ten minutes away): the operator retries now.
    expect(await byKey.get(EventrailAdmin).retryParked(GROUP)).toBe(1);
    const allHandled = () => keyNames.every((key) => firstHandlings(key).length >= 6);
    const trimming = trimWhile(byKey, allHandled);
    await publish(byKey, interleaved(keyNames, 7, 9));
    const { breaches, trimmed } = await trimming;
    expect(trimmed).toBeGreaterThan(0);
    const nine = () => keyNames.every((key) => firstHandlings(key).length === 9);
    await waitFor(nine, () => `every message handled (${new Set(dependency.handled).size} of 54)`, 30_000);
    expect(breaches).toEqual([]);
    for (const key of keyNames) expect([key, firstHandlings(key)]).toEqual([key, [1, 2, 3, 4, 5, 6, 7, 8, 9]]);
    expect(await byKey.get(EventrailAdmin).deadLetterCount(GROUP)).toBe(0);
  }, 90_000);

  it("lines 'unordered' parked for one key, taken by a 'partition' member (it works them with 'key'): merged, first handled in log order while retention trims to the floor", async () => {
    const holding = await start(UnorderedHolding);
    const keyNames = ['A', 'B', 'C'];
    for (const key of ['A', 'B']) for (let n = 1; n <= 5; n++) dependency.failures.set(`${key}:${n}`, 1);
    await publish(holding, interleaved(keyNames, 1, 5));
    await waitFor(
      async () => Object.keys(await redis.hgetall(keys.recovery(GROUP, 0))).filter((f) => f.startsWith('park:m:')).length === 10,
      'ten lines parked by the unordered member',
    );
    await stop(holding);
    dependency.failures.set('A:3', 1); // fails again inside the merged line's first chunk
    const byPartition = await start(ByPartition);
    expect(await byPartition.get(EventrailAdmin).retryParked(GROUP)).toBe(1);
    const allHandled = () => keyNames.every((key) => firstHandlings(key).length >= 5);
    const trimming = trimWhile(byPartition, allHandled);
    await publish(byPartition, interleaved(keyNames, 6, 7));
    const { breaches } = await trimming;
    await waitFor(
      () => keyNames.every((key) => firstHandlings(key).length === 7),
      () => `every message handled (${new Set(dependency.handled).size} of 21)`,
      30_000,
    );
    expect(breaches).toEqual([]);
    for (const key of keyNames) expect([key, firstHandlings(key)]).toEqual([key, [1, 2, 3, 4, 5, 6, 7]]);
    expect(await byPartition.get(EventrailAdmin).deadLetterCount(GROUP)).toBe(0);
  }, 90_000);

  it("ordering switched 'unordered' -> 'key' -> 'partition' -> 'unordered' while lines cycle and retention trims to the floor: nothing lost, each member's floor holds", async () => {
    const keyNames = Array.from({ length: 12 }, (_, i) => `M${i}`);
    for (const key of keyNames) for (let n = 1; n <= 8; n++) dependency.failures.set(`${key}:${n}`, n % 3 === 1 ? 2 : 0);
    const total = keyNames.length * 8;
    const distinct = () => new Set(dependency.handled).size;
    const breaches: string[] = [];
    let published = 0;
    for (const [round, provider] of [UnorderedChunked, ByKeyChunked, ByPartition, UnorderedChunked].entries()) {
      const app = await start(provider);
      await publish(app, interleaved(keyNames, round * 2 + 1, round * 2 + 2));
      published += keyNames.length * 2;
      const target = Math.min(published, total) - keyNames.length; // go on with lines still parked
      const seen = await trimWhile(app, () => distinct() >= target);
      breaches.push(...seen.breaches);
      await stop(app);
      expect(await floorBreach()).toBeUndefined();
    }
    const last = await start(ByKeyChunked);
    const seen = await trimWhile(last, () => distinct() === total);
    breaches.push(...seen.breaches);
    await waitFor(
      () => distinct() === total,
      () => `every message handled (${distinct()} of ${total})`,
      30_000,
    );
    expect(breaches).toEqual([]);
    expect(await last.get(EventrailAdmin).deadLetterCount(GROUP)).toBe(0);
  }, 120_000);
});

/** Every key but 'healthy' fails while `down`, after `failAfterMs` (a dependency that times out). */
const slowDependency = {
  down: false,
  failAfterMs: 0,
  handled: new Map<string, number[]>(),
  async call(message: EventrailMessage<Data>): Promise<void> {
    if (this.down && message.data.key !== 'healthy') {
      if (this.failAfterMs > 0) await new Promise((resolve) => setTimeout(resolve, this.failAfterMs));
      throw new Error(`${message.data.key} is down`);
    }
    const seen = this.handled.get(message.data.key) ?? [];
    seen.push(message.data.n);
    this.handled.set(message.data.key, seen);
  },
};

@Injectable()
class ByKeySlowFailures {
  @OnEvent('account.changed', {
    group: 'slow-failures',
    ordering: 'key',
    maxRetries: 0,
    redelivery: { delayMs: 500, factor: 2, maxDelayMs: 1_000, maxAgeMs: 600_000 },
  })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return slowDependency.call(message);
  }
}

describe('parked keys under attack: a healthy key while many lines cycle and each failure takes a while', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let app: INestApplicationContext | undefined;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked-scale-slow');
    keys = new EventrailKeys(prefix, 1);
    Object.assign(slowDependency, { down: false, failAfterMs: 0, handled: new Map() });
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  // Found by this attack, not fixed: up to 128 lines are redelivered at once and each call waits for a
  // permit of `concurrency` (1) in turn, so a healthy key's message waits behind up to 128 failing calls,
  // however long each takes to fail. Measured with 400 lines cycling through 0.5-1 s tiers: failures
  // taking 20 ms, a healthy message in 125-2605 ms (median), 2652-2848 ms at worst; taking 100 ms,
  // 3446 ms median and 12800-12912 ms at worst (about 128 x 100 ms). The documented 332 ms worst was
  // measured with failures that take no time.
  it.skip.each([20, 100])(
    '400 keys whose calls fail after %i ms: a healthy key is handled within 2 s while their lines cycle',
    async (failAfterMs) => {
      app = await createApp({ prefix }, [ByKeySlowFailures]);
      const publisher = app.get(EventrailPublisher);
      slowDependency.down = true;
      const keyCount = 400;
      await publisher.publishMany(
        Array.from({ length: keyCount }, (_, k) => ({ event: 'account.changed', data: { key: `s${k}`, n: 1 }, key: `s${k}` })),
      );
      await waitFor(
        async () =>
          Object.keys(await redis.hgetall(keys.recovery('slow-failures', 0))).filter((f) => f.startsWith('park:')).length === keyCount,
        'every line parked',
        60_000,
        100,
      );
      slowDependency.failAfterMs = failAfterMs;
      const latencies: number[] = [];
      const until = Date.now() + 8_000;
      for (let n = 1; Date.now() < until; n++) {
        const t = Date.now();
        await publisher.publish('account.changed', { key: 'healthy', n }, { key: 'healthy' });
        await waitFor(() => slowDependency.handled.get('healthy')?.length === n, `healthy message ${n} handled`, 60_000, 5);
        latencies.push(Date.now() - t);
      }
      const sorted = [...latencies].sort((x, y) => x - y);
      console.log(
        `${keyCount} lines failing in ${failAfterMs} ms each: a healthy key's ${latencies.length} messages handled in median ${sorted[sorted.length >> 1]} ms, worst ${sorted[sorted.length - 1]} ms`,
      );
      expect(sorted[sorted.length - 1]).toBeLessThan(2_000);
      slowDependency.down = false;
      await waitFor(
        () => Array.from({ length: keyCount }, (_, k) => slowDependency.handled.get(`s${k}`)?.length === 1).every(Boolean),
        'every key handled once back',
        60_000,
        100,
      );
    },
    120_000,
  );
});
