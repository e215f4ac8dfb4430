import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const LOCK_TTL_MS = 600;
const MAX_DELIVERIES = 2;
/** Longer than the lease: a renewal cannot land meanwhile. */
const STALL_MS = Math.round(LOCK_TTL_MS * 1.8);
/** Stalls a test injects: more than `maxDeliveries`. */
const STALLS = 3;

type Data = { key: string; n: number };

/** Blocks the event loop, the fault under test: no renewal, no commit, no timer runs meanwhile. */
function blockEventLoop(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // busy on purpose
  }
}

const settle = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * What the handlers saw, and what a test makes them do: `behave` runs inside
 * every call (given the entry and how many calls of it came before), and a
 * throw from it fails the call.
 */
const world = {
  calls: [] as number[],
  finished: [] as number[],
  /** The entry a batch call is recorded under when the batch holds it. */
  blocker: -1,
  behave: async (_n: number, _earlier: number): Promise<void> => undefined,
};

async function call(n: number): Promise<void> {
  const earlier = world.calls.filter((c) => c === n).length;
  world.calls.push(n);
  await world.behave(n, earlier);
  world.finished.push(n);
}

const callsOf = (n: number): number => world.calls.filter((c) => c === n).length;

const LEASE = { lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: LOCK_TTL_MS, maxDeliveries: MAX_DELIVERIES } as const;
const BY_TIME = { maxRetryAgeMs: 600_000, retryBackoffMs: 5, retryBackoffMaxMs: 50 } as const;
const PARKED_TIERS = { maxRetries: 0, redelivery: { delayMs: 20, maxDelayMs: 100, maxAgeMs: 600_000 } } as const;

@Injectable()
class PartitionOrder {
  @OnEvent('job.run', { group: 'jobs', ordering: 'partition', ...LEASE, ...BY_TIME })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return call(message.data.n);
  }
}

@Injectable()
class KeyOrder {
  @OnEvent('job.run', { group: 'jobs', ordering: 'key', concurrency: 4, ...LEASE, ...PARKED_TIERS })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return call(message.data.n);
  }
}

@Injectable()
class Unordered {
  @OnEvent('job.run', { group: 'jobs', ordering: 'unordered', concurrency: 4, ...LEASE, ...PARKED_TIERS })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return call(message.data.n);
  }
}

@Injectable()
class Batches {
  @OnEvent('job.run', { group: 'jobs', ordering: 'partition', batch: { maxSize: 5 }, ...LEASE, ...BY_TIME })
  async handle(messages: EventrailMessage<Data>[]): Promise<void> {
    // One call for the batch: recorded under its first entry, finished for all.
    const earlier = world.calls.filter((c) => c === messages[0].data.n).length;
    for (const m of messages) world.calls.push(m.data.n);
    await world.behave(messages.map((m) => m.data.n).includes(world.blocker) ? world.blocker : messages[0].data.n, earlier);
    for (const m of messages) world.finished.push(m.data.n);
  }
}

/**
 * A live process that takes back its own lapsed lease counts a delivery for
 * the entry it starts at unless a call of that entry ended while the lease
 * held. Attacked both ways: stalls that come and go must not dead-letter a
 * healthy or time-retrying entry; an entry whose every call outlives the
 * lease must be dead-lettered after about `maxDeliveries` take-backs, the
 * entries after it going on.
 */
describe('counting deliveries at a take-back of its own lease', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;
  let losses: number;
  let acquired: number;
  /** When (ms since the test began) each lease loss was reported. */
  let lossTimes: number[];
  let t0: number;
  let timers: NodeJS.Timeout[];

  beforeEach(() => {
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('stallcount');
    losses = 0;
    acquired = 0;
    lossTimes = [];
    t0 = performance.now();
    timers = [];
    Object.assign(world, { calls: [], finished: [], blocker: -1, behave: async () => undefined });
  });

  afterEach(async () => {
    for (const timer of timers) clearTimeout(timer);
    world.behave = async () => undefined;
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  const start = async (provider: new () => unknown): Promise<{ publisher: EventrailPublisher; admin: EventrailAdmin }> => {
    app = await createApp(
      {
        prefix,
        metrics: {
          onLeaseLost: () => lossTimes.push(Math.round(performance.now() - t0)) && losses++,
          onLeaseAcquired: () => acquired++,
        },
      },
      [provider],
    );
    return { publisher: app.get(EventrailPublisher), admin: app.get(EventrailAdmin) };
  };

  /** A pause of the whole process (a GC pause) `afterMs` into the call in hand, from outside the handler. */
  const pauseProcessSoon = (afterMs: number): void => {
    timers.push(setTimeout(() => blockEventLoop(STALL_MS), afterMs));
  };

  const reasons = async (admin: EventrailAdmin): Promise<string[]> =>
    (await admin.deadLetters('jobs')).map((d) => `${(d.data as Data).n} ${d.reason} (${d.attempts} attempts)`);

  describe('stalls that come and go', () => {
    // Failed while a take-back of its own lapsed lease counted entries whose calls outlived it (053f01c):
    // (2 of 2 runs): a take-back counts the entry whose call was in flight (its call ended after the lease lapsed,
    // through no fault of its own), so two GC pauses landing in its 200 ms I/O dead-letter a heal ...; a live
    // process's stalls now count nothing.
    it("'partition': a healthy entry whose call is slow (I/O) and in flight at each of 3 GC pauses is not dead-lettered", async () => {
      world.behave = async (n, earlier) => {
        if (n !== 1) return;
        if (earlier < STALLS) pauseProcessSoon(30);
        await settle(200); // a slow, healthy dependency call
      };
      const { publisher, admin } = await start(PartitionOrder);
      const began = performance.now();
      await publisher.publish('job.run', { key: 'a', n: 1 }, { key: 'a' });
      await publisher.publish('job.run', { key: 'a', n: 2 }, { key: 'a' });
      await waitFor(
        async () => world.finished.includes(2) || (await admin.deadLetterCount('jobs')) > 0,
        () => `entry 2 handled or a dead letter (calls ${JSON.stringify(world.calls)}, ${losses} losses)`,
        30_000,
      );
      console.log(
        `slow healthy entry, GC pauses: calls ${JSON.stringify(world.calls)}, ${losses} lease losses, ` +
          `dead letters ${JSON.stringify(await reasons(admin))}, ${Math.round(performance.now() - began)} ms`,
      );
      expect(await reasons(admin)).toEqual([]);
      expect(world.finished).toEqual(expect.arrayContaining([1, 2]));
    });

    // Failed while a take-back of its own lapsed lease counted entries whose calls outlived it (053f01c):
    // (2 of 2 runs): the handler's own Redis read waits out each pause, so its call ends after the lease lapsed and
    // the take-back counts it: calls [1,1,2], 2 lease losses, dead letters ["1 max-deliveries (2 ...; a live
    // process's stalls now count nothing.
    it("'partition': an entry retrying by time whose own Redis call is caught by each of 3 Redis pauses is not dead-lettered", async () => {
      const dependency = new Redis(testRedisUrl());
      const pauser = new Redis(testRedisUrl());
      try {
        world.behave = async (n, earlier) => {
          if (n !== 1) return;
          // Redis stalls past the lease while this call waits on it (its store is the same Redis).
          if (earlier < STALLS) await pauser.client('PAUSE', String(STALL_MS), 'ALL');
          await dependency.get(`${prefix}:dependency`);
          if (earlier < STALLS + 2) throw new Error('ledger database unavailable');
        };
        const { publisher, admin } = await start(PartitionOrder);
        const began = performance.now();
        await publisher.publish('job.run', { key: 'a', n: 1 }, { key: 'a' });
        await publisher.publish('job.run', { key: 'a', n: 2 }, { key: 'a' });
        await waitFor(
          async () => world.finished.includes(2) || (await admin.deadLetterCount('jobs')) > 0,
          () => `entry 2 handled or a dead letter (calls ${JSON.stringify(world.calls)}, ${losses} losses)`,
          30_000,
        );
        console.log(
          `retrying by time, Redis pauses: calls ${JSON.stringify(world.calls)}, ${losses} lease losses, ` +
            `dead letters ${JSON.stringify(await reasons(admin))}, ${Math.round(performance.now() - began)} ms`,
        );
        expect(await reasons(admin)).toEqual([]);
        expect(world.finished).toEqual(expect.arrayContaining([1, 2]));
      } finally {
        dependency.disconnect();
        pauser.disconnect();
      }
    });

    // Failed while a take-back of its own lapsed lease counted entries whose calls outlived it (053f01c):
    // (2 of 2 runs): the first pause is spared (the parking call ended under the lease), the next ones are counted,
    // since the worker that took the lease back never saw a call of the head end before the next ...; a live
    // process's stalls now count nothing.
    it("'key': a parked head whose slow redeliveries are each caught by a GC pause, 3 in a row, is not dead-lettered", async () => {
      world.behave = async (n, earlier) => {
        if (n !== 1) return;
        if (earlier === 0) throw new Error('first try fails: parked');
        if (earlier <= STALLS) pauseProcessSoon(30);
        await settle(200);
        if (earlier <= STALLS + 1) throw new Error('still unavailable');
      };
      const { publisher, admin } = await start(KeyOrder);
      const began = performance.now();
      await publisher.publish('job.run', { key: 'a', n: 1 }, { key: 'a' });
      await publisher.publish('job.run', { key: 'a', n: 2 }, { key: 'a' });
      await waitFor(
        async () => world.finished.includes(2) || (await admin.deadLetterCount('jobs')) > 0,
        () => `entry 2 handled or a dead letter (calls ${JSON.stringify(world.calls)}, ${losses} losses)`,
        30_000,
      );
      console.log(
        `parked head, GC pauses in its redeliveries: calls ${JSON.stringify(world.calls)}, ${losses} lease losses, ` +
          `dead letters ${JSON.stringify(await reasons(admin))}, ${Math.round(performance.now() - began)} ms`,
      );
      expect(await reasons(admin)).toEqual([]);
      expect(world.finished).toEqual([1, 2]);
    });

    // Fails: as for a single handler, the batch in flight at each pause is counted: calls [1,2,3] then [1,2],
    // 2 lease losses, dead letters ["1 max-deliveries (2 attempts)"], about 2.4 s.
    it('batch handler: a healthy slow batch in flight at each of 3 GC pauses is not dead-lettered', async () => {
      world.behave = async (n, earlier) => {
        if (n !== 1) return;
        if (earlier < STALLS) pauseProcessSoon(30);
        await settle(200);
      };
      const { publisher, admin } = await start(Batches);
      const began = performance.now();
      await publisher.publishMany([1, 2, 3].map((n) => ({ event: 'job.run', key: 'a', data: { key: 'a', n } })));
      // Calls whose result was fenced finish too: wait for the call after the last pause, then for an entry behind it.
      await waitFor(
        async () => world.finished.filter((n) => n === 1).length > STALLS || (await admin.deadLetterCount('jobs')) > 0,
        () => `a call of entry 1 after ${STALLS} pauses, or a dead letter (calls ${JSON.stringify(world.calls)}, ${losses} losses)`,
        30_000,
      );
      await publisher.publish('job.run', { key: 'a', n: 4 }, { key: 'a' });
      await waitFor(
        async () => world.finished.includes(4) || (await admin.deadLetterCount('jobs')) > 0,
        () => `entry 4 handled or a dead letter (calls ${JSON.stringify(world.calls)}, ${losses} losses)`,
        30_000,
      );
      console.log(
        `healthy slow batch, GC pauses: calls ${JSON.stringify(world.calls)}, ${losses} lease losses, ` +
          `dead letters ${JSON.stringify(await reasons(admin))}, ${Math.round(performance.now() - began)} ms`,
      );
      expect(await reasons(admin)).toEqual([]);
    });

    // Failed while a take-back of its own lapsed lease counted entries whose calls outlived it (053f01c):
    // (5 of 5 runs, entry 21 not handled within 30 s): entries 1-20 are handled, but entry 21, published 1 ms after
    // the fourth pause ended, is dead-lettered as max-deliveries (2 attempts) without ever being ...; a live
    // process's stalls now count nothing.
    it("'unordered' with concurrency 4: GC pauses every 2 s over a stream where one healthy call takes 800 ms dead-letter nothing", async () => {
      world.behave = async (n) => {
        await settle(n === 5 ? 800 : 20);
      };
      const { publisher, admin } = await start(Unordered);
      const began = performance.now();
      let pauses = 0;
      const pauseEnds: number[] = [];
      // Pauses of the process that come and go, at their own pace: the fault injected, not a wait.
      const gc = setInterval(() => {
        if (pauses >= 4) return;
        pauses++;
        blockEventLoop(STALL_MS);
        pauseEnds.push(Math.round(performance.now() - t0));
      }, 2_000);
      try {
        await publisher.publishMany(
          Array.from({ length: 20 }, (_, i) => ({ event: 'job.run', key: `k${i % 4}`, data: { key: `k${i % 4}`, n: i + 1 } })),
        );
        await waitFor(
          async () => pauses >= 4 && (world.finished.includes(5) || (await admin.deadLetterCount('jobs')) > 0),
          () => `4 pauses, then entry 5 handled or dead-lettered (${pauses} pauses, calls of 5: ${callsOf(5)}, ${losses} losses)`,
          40_000,
        );
      } finally {
        clearInterval(gc);
      }
      const publishedAt = Math.round(performance.now() - t0);
      await publisher.publish('job.run', { key: 'k0', n: 21 }, { key: 'k0' });
      let letters: string[] = [];
      await waitFor(
        async () => {
          letters = await reasons(admin);
          return world.finished.includes(21);
        },
        () =>
          `entry 21 handled (published at ${publishedAt} ms, pauses ended at ${JSON.stringify(pauseEnds)}, ` +
          `losses at ${JSON.stringify(lossTimes)}, calls ${JSON.stringify(world.calls)}, finished ${JSON.stringify([...new Set(world.finished)])}, ` +
          `dead letters ${JSON.stringify(letters)})`,
        30_000,
      );
      console.log(
        `stream with one 800 ms call, GC pause every 2 s: calls of 5: ${callsOf(5)}, ${losses} lease losses, ${pauses} pauses, ` +
          `dead letters ${JSON.stringify(await reasons(admin))}, ${Math.round(performance.now() - began)} ms`,
      );
      expect(await reasons(admin)).toEqual([]);
    });

    // Failed while a take-back of its own lapsed lease counted entries whose calls outlived it (053f01c):
    // (4 of 4 runs): no handler runs at either pause, yet entry 2, published right after the second, is dead-
    // lettered as max-deliveries (2 attempts) and never called: calls [1], 2 lease losses (about 1.1 s ...; a live
    // process's stalls now count nothing.
    it("'partition': an entry published right after a GC pause of an idle worker that took its lease back once is handled", async () => {
      const { publisher, admin } = await start(PartitionOrder);
      const began = performance.now();
      await publisher.publish('job.run', { key: 'a', n: 1 }, { key: 'a' });
      await waitFor(
        () => world.finished.includes(1),
        () => 'entry 1 handled',
        20_000,
      );
      // Two pauses of the idle process, the second as soon as the lease was taken back after the first.
      blockEventLoop(STALL_MS);
      await waitFor(
        () => losses >= 1,
        () => 'the first lease loss',
        20_000,
      );
      await waitFor(
        () => acquired >= 2,
        () => `the lease taken back (${acquired} acquired)`,
        20_000,
      );
      blockEventLoop(STALL_MS);
      await publisher.publish('job.run', { key: 'a', n: 2 }, { key: 'a' });
      let letters: string[] = [];
      await waitFor(
        async () => {
          letters = await reasons(admin);
          return world.finished.includes(2) || letters.length > 0;
        },
        () => `entry 2 handled or dead-lettered (${losses} losses, calls ${JSON.stringify(world.calls)})`,
        20_000,
      );
      console.log(
        `idle worker, 2 GC pauses, entry published after the second: calls ${JSON.stringify(world.calls)}, ${losses} lease losses at ` +
          `${JSON.stringify(lossTimes)}, dead letters ${JSON.stringify(letters)}, ${Math.round(performance.now() - began)} ms`,
      );
      expect(letters).toEqual([]);
      expect(world.finished).toEqual([1, 2]);
    });

    it("'key': 1,100 keys retrying by time with quick failures, 3 GC pauses between calls, dead-letter none", async () => {
      const KEYS = 1_100;
      let failing = true;
      let pauses = 0;
      world.behave = async () => {
        // Every 2,500th call schedules a pause that lands between calls: the heads' calls all ended quickly.
        if (failing && world.calls.length % 2_500 === 0 && pauses < STALLS) {
          pauses++;
          pauseProcessSoon(0);
        }
        if (failing) throw new Error('dependency down');
      };
      const { publisher, admin } = await start(KeyOrder);
      const began = performance.now();
      for (let from = 0; from < KEYS; from += 250) {
        await publisher.publishMany(
          Array.from({ length: Math.min(250, KEYS - from) }, (_, i) => ({
            event: 'job.run',
            key: `key-${from + i}`,
            data: { key: `key-${from + i}`, n: from + i + 1 },
          })),
        );
      }
      await waitFor(
        async () => (pauses >= STALLS && losses >= STALLS) || (await admin.deadLetterCount('jobs')) > 0,
        () => `${STALLS} pauses and lease losses or a dead letter (${pauses} pauses, ${losses} losses, ${world.calls.length} calls)`,
        45_000,
      );
      failing = false;
      await waitFor(
        async () => new Set(world.finished).size === KEYS || (await admin.deadLetterCount('jobs')) > 0,
        () => `all ${KEYS} handled (${new Set(world.finished).size} so far, ${losses} losses)`,
        45_000,
      );
      const letters = await reasons(admin);
      console.log(
        `${KEYS} parked keys, ${pauses} GC pauses: ${world.calls.length} calls, ${losses} lease losses, ${letters.length} dead letters ` +
          `${JSON.stringify(letters.slice(0, 5))}, ${new Set(world.finished).size} handled, ${Math.round(performance.now() - began)} ms`,
      );
      expect(letters).toEqual([]);
    }, 120_000);
  });

  describe('an entry whose every call outlives the lease', () => {
    /**
     * Publishes entries 1..`count` over keys k0..k3 with `blocker` among them, and more of the other keys
     * while waiting (a healthy stream); waits until the blocker is dead-lettered and all the rest handled,
     * or the blocker is called 5 x maxDeliveries times.
     */
    const expectBounded = async (
      provider: new () => unknown,
      blocker: number,
      count: number,
      keyOf: (n: number) => string = (n) => `k${n % 4}`,
      /** Calls of the blocker allowed: one per delivery, and one more for a take-back that had nothing to count. */
      bound = MAX_DELIVERIES + 1,
    ): Promise<void> => {
      world.blocker = blocker;
      const { publisher, admin } = await start(provider);
      const began = performance.now();
      let published = count;
      await publisher.publishMany(
        Array.from({ length: count }, (_, i) => ({ event: 'job.run', key: keyOf(i + 1), data: { key: keyOf(i + 1), n: i + 1 } })),
      );
      const stream = setInterval(() => {
        if (published >= count + 40) return;
        published++;
        const n = published;
        // Other keys only: the stream must not be behind the blocker's key.
        void publisher.publish('job.run', { key: `other${n % 3}`, n }, { key: `other${n % 3}` }).catch(() => undefined);
      }, 100);
      try {
        await waitFor(
          async () => {
            if (callsOf(blocker) >= 5 * MAX_DELIVERIES) return true;
            if ((await admin.deadLetterCount('jobs')) === 0) return false;
            for (let n = 1; n <= published; n++) if (n !== blocker && !world.finished.includes(n)) return false;
            return published >= count + 40;
          },
          () =>
            `blocker dead-lettered and the rest handled, or ${5 * MAX_DELIVERIES} blocker calls (blocker calls ${callsOf(blocker)}, ` +
            `${world.finished.length} finished of ${published}, ${losses} losses)`,
          40_000,
        );
      } finally {
        clearInterval(stream);
        const letters = await reasons(admin);
        const lettered = (await admin.deadLetters('jobs')).map((d) => (d.data as Data).n);
        console.log(
          `blocker ${blocker}: ${callsOf(blocker)} calls, ${losses} lease losses, dead letters ${JSON.stringify(letters)}, ` +
            `${new Set(world.finished).size} distinct finished of ${published}, dead-lettered yet some call finished: ` +
            `${JSON.stringify(lettered.filter((n) => world.finished.includes(n)))}, ${Math.round(performance.now() - began)} ms`,
        );
      }
      const letters = await reasons(admin);
      // Calls fenced by a lapsed lease finish too: the group's offset says what was really done.
      await waitFor(
        async () => (await admin.group('jobs')).lag === 0,
        () => `the group's lag at 0`,
        20_000,
      );
      expect(letters).toEqual([expect.stringMatching(new RegExp(`^${blocker} max-deliveries`))]);
      expect(callsOf(blocker)).toBeLessThanOrEqual(bound);
    };

    // Skipped, a documented limit (docs/reference/guarantees.md): stalls of a live process count nothing towards
    // maxDeliveries, so an entry whose handler blocks the event loop past lockTtlMs on every call is tried again and
    // again (the GroupConsumer warns after 3 take-backs at one offset; test/consumer/exhaustion-attack-stalls). These
    // four passed while take-backs counted such entries (053f01c), which dead-lettered healthy ones caught by stalls.
    it.skip("'partition': an async handler that awaits, then blocks the event loop, is dead-lettered and the next entries go on", async () => {
      world.behave = async (n) => {
        await settle(20);
        if (n === 1) blockEventLoop(STALL_MS);
      };
      await expectBounded(PartitionOrder, 1, 3, () => 'a');
    });

    it.skip("'key' with concurrency 4, the blocker third in the fetch among keys that succeed", async () => {
      world.behave = async (n) => {
        await settle(5);
        if (n === 3) blockEventLoop(STALL_MS);
      };
      await expectBounded(KeyOrder, 3, 12);
    });

    it.skip("'unordered' with concurrency 4, the blocker third in the fetch among entries that succeed", async () => {
      world.behave = async (n) => {
        await settle(5);
        if (n === 3) blockEventLoop(STALL_MS);
      };
      await expectBounded(Unordered, 3, 12);
    });

    it.skip('batch handler: a batch holding the blocker blocks the event loop each time', async () => {
      world.behave = async (n) => {
        if (n === 3) blockEventLoop(STALL_MS);
      };
      await expectBounded(Batches, 3, 8, () => 'a');
    });

    // Skipped, the same documented limit. Measured while take-backs counted (053f01c):
    // the blocking head (entry 3) is dead-lettered after 4 calls as expected, but each blocking
    // redelivery also lapses the lease under the main stream, and the healthy entry in hand there is counted at each
    // take-back: entry 13 (or 14) of another key is dead-lettered as max-deliveries, in 4 runs twice
    // (["13 max-deliveries (2 attempts)", "3 max-deliveries (2 attempts)", "13 max-deliveries (3 attempts)"]); in
    // 2 runs entry 13 was never handled (40 s, 50 of 52 handled), in 1 it was handled and dead-lettered twice.
    it.skip("'key': a parked head whose every redelivery blocks the event loop, while other keys progress", async () => {
      world.behave = async (n, earlier) => {
        if (n !== 3) return;
        if (earlier === 0) throw new Error('first try fails: parked');
        blockEventLoop(STALL_MS);
        throw new Error('still failing');
      };
      // The first call parks it; the redelivery left running at the first take-back was spared by that call.
      await expectBounded(KeyOrder, 3, 12, undefined, MAX_DELIVERIES + 2);
    });
  });
});
