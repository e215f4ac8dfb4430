import Redis from 'ioredis';
import { EventrailPublisher, PublishInput, PublishResult } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { chaosKeys, EVENTS, GROUPS } from './support/chaos-protocol';
import { offsetsAndEnds } from './support/log-checks';
import { useSupervisedRun } from './support/supervised-run';
import { Supervisor } from './support/supervisor';

const PARTITIONS = 4;
const WORKERS = 3;
const UNIQUE_EVENTS = 120;
const BATCH = 4;
/** Share of batches the producer sends a second time, with the same event ids. */
const RESEND_RATE = 0.1;
/** Share of handler calls that SIGKILL their process right after their side effect. */
const CRASH_RATE = 0.1;
const PACE_MS = 40;
const LOCK_TTL_MS = 600;
const DEDUP_WINDOW_MS = 120_000;
const DRAIN_TIMEOUT_MS = 150_000;
const TOTAL_GROUPS = [GROUPS.ledger, GROUPS.counter] as const;

interface Payment {
  id: string;
  key: string;
  amount: number;
}

interface Sends {
  first: PublishResult[];
  second: PublishResult[];
}

/**
 * Double sends and crashed consumers (the unified-log experiment): the
 * producer sends about 10% of its batches a second time with the same event
 * ids, one to three batches later (an outbox relay retrying), and about 10%
 * of handler calls SIGKILL their own process right after their side effect,
 * before the library can commit it; a supervisor restarts the process at
 * once. Two groups, `ledger` (sum of amounts) and `counter` (number of
 * payments), run with `enableIdempotency` and a handler that updates its
 * total and its own idempotency record in one Lua script (SET NX on a
 * per-group seen-key of the event id, INCRBY only when it was new).
 *
 * Run twice: with producer dedup (every second send must append nothing and
 * return the first offset), and without (the log holds the duplicates, and
 * the library's done-marks must skip some of them). Both runs must end with
 * exactly the expected totals, no dead letters, offsets at the end of the log,
 * and every worker death accounted for by a handler's crash decision.
 */
describe('chaos: double sends and crashed consumers', () => {
  const redis = new Redis(testRedisUrl());
  const prefixes: string[] = [];
  const current = useSupervisedRun();

  afterAll(async () => {
    for (const prefix of prefixes) await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('producer dedup on: both groups end with exactly the expected totals', () => run(true), 240_000);

  it('producer dedup off: both groups end with exactly the expected totals', () => run(false), 240_000);

  async function run(dedup: boolean): Promise<void> {
    const began = Date.now();
    const prefix = uniquePrefix(dedup ? 'chaos-dedup-on' : 'chaos-dedup-off');
    prefixes.push(prefix);
    const keys = new EventrailKeys(prefix, PARTITIONS);
    const app = await createApp({ prefix, partitions: PARTITIONS, dedupWindowMs: dedup ? DEDUP_WINDOW_MS : 0 });
    current.app = app;

    const sup = new Supervisor(
      {
        mode: 'double-sends',
        redisUrl: testRedisUrl(),
        prefix,
        partitions: PARTITIONS,
        consumer: { lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: LOCK_TTL_MS, batchSize: 20 },
        crashRate: CRASH_RATE,
      },
      WORKERS,
    );
    current.supervisor = sup;
    sup.start();

    const payments: Payment[] = Array.from({ length: UNIQUE_EVENTS }, (_, n) => ({
      id: `pay-${prefix}-${n}`,
      key: `account-${n % 16}`,
      amount: 1 + Math.floor(Math.random() * 100),
    }));
    const sends = await publishWithResends(app.get(EventrailPublisher), payments);
    const producedMs = Date.now() - began;

    let ends: string[] = [];
    await waitFor(
      async () => {
        ends = [];
        for (const group of TOTAL_GROUPS) {
          const state = await offsetsAndEnds(redis, keys, group);
          ends.push(`${group}: ${JSON.stringify(state)}`);
          if (!state.every(({ committed, last }) => last === null || committed === last)) return false;
        }
        return true;
      },
      () => `both groups at the end of the log\n${ends.join('\n')}\n${sup.describe()}`,
      DRAIN_TIMEOUT_MS,
      100,
    );
    const drainedMs = Date.now() - began - producedMs;
    await sup.refreshStats();
    await sup.stop();

    const expected: Record<string, number> = {
      [GROUPS.ledger]: payments.reduce((sum, p) => sum + p.amount, 0),
      [GROUPS.counter]: payments.length,
    };
    const perGroup = async (key: (group: string) => string): Promise<number[]> =>
      (await redis.mget(...TOTAL_GROUPS.map(key))).map((v) => Number(v ?? 0));
    const totals = await perGroup((g) => chaosKeys.total(prefix, g));
    const calls = await perGroup((g) => chaosKeys.calls(prefix, g));
    const hits = await perGroup((g) => chaosKeys.hits(prefix, g));
    const skipped = TOTAL_GROUPS.map((g) => sup.stats(g).skippedDuplicates);
    const deadLetters = await Promise.all(TOTAL_GROUPS.map((g) => redis.xlen(keys.deadLetters(g))));
    const logLength = (await Promise.all(keys.streams.map((s) => redis.xlen(s)))).reduce((a, b) => a + b, 0);
    const crashedPids = (await redis.smembers(chaosKeys.crashedPids(prefix))).map(Number);
    const refused = sends.second.filter((r) => r.duplicate === true).length;

    console.log(
      `double-sends, dedup ${dedup ? 'on' : 'off'}: ${UNIQUE_EVENTS} payments, ${sends.second.length} sent twice ` +
        `(${refused} refused by producer dedup, ${sends.second.length - refused} appended again), ${logLength} log entries; ` +
        `${crashedPids.length} crashes after the side effect, ${sup.restarts} restarts; ` +
        TOTAL_GROUPS.map(
          (g, i) =>
            `${g}: total ${totals[i]} (expected ${expected[g]}), ${calls[i]} handler calls, ` +
            `${hits[i]} skipped by the handler's own idempotency record, ${skipped[i]} skipped by enableIdempotency (at least)`,
        ).join('; ') +
        `; produced in ${producedMs} ms, drained ${drainedMs} ms later, ${Date.now() - began} ms in all`,
    );

    expect(Object.fromEntries(TOTAL_GROUPS.map((g, i) => [g, totals[i]]))).toEqual(expected);
    expect(deadLetters).toEqual([0, 0]);
    expect(sends.second.length).toBeGreaterThan(0);
    expect(crashedPids.length).toBeGreaterThan(0);
    expect(sup.unexpectedExits).toEqual([]);
    // Every process that died of a SIGKILL of its own had decided to crash, and every one that decided so died:
    // of its own SIGKILL, or of the final stop's if that came first (a fenced handler may still run after the drain).
    expect(sup.crashes.filter((e) => !crashedPids.includes(e.pid))).toEqual([]);
    const died = new Set(sup.exits.filter((e) => e.signal === 'SIGKILL').map((e) => e.pid));
    expect(crashedPids.filter((pid) => !died.has(pid))).toEqual([]);
    expect(sup.restarts).toBe(sup.crashes.length);
    if (dedup) {
      expect(refused).toBe(sends.second.length);
      expect(logLength).toBe(UNIQUE_EVENTS);
      const firstOffset = new Map(sends.first.map((r) => [r.id, r.offset]));
      expect(sends.second.filter((r) => r.offset !== firstOffset.get(r.id))).toEqual([]);
    } else {
      expect(refused).toBe(0);
      expect(logLength).toBe(UNIQUE_EVENTS + sends.second.length);
      // The log holds the duplicates: the library's done-marks skipped some of them without a handler call.
      expect(skipped.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    }
  }
});

/** Publishes `payments` in batches of BATCH; about RESEND_RATE of the batches go again one to three batches later. */
async function publishWithResends(publisher: EventrailPublisher, payments: readonly Payment[]): Promise<Sends> {
  const batches: Payment[][] = [];
  for (let i = 0; i < payments.length; i += BATCH) batches.push(payments.slice(i, i + BATCH));
  const resend = pickShare(batches.length, RESEND_RATE);
  const sends: Sends = { first: [], second: [] };
  const due = new Map<number, Payment[][]>();
  for (let b = 0; b < batches.length || due.size > 0; b++) {
    if (b < batches.length) {
      sends.first.push(...(await publisher.publishMany(inputs(batches[b]))));
      if (resend.has(b)) {
        const at = b + 1 + Math.floor(Math.random() * 3);
        due.set(at, [...(due.get(at) ?? []), batches[b]]);
      }
    }
    for (const batch of due.get(b) ?? []) sends.second.push(...(await publisher.publishMany(inputs(batch))));
    due.delete(b);
    await pause(PACE_MS);
  }
  return sends;
}

function inputs(batch: readonly Payment[]): PublishInput[] {
  return batch.map((p) => ({ event: EVENTS.payment, key: p.key, id: p.id, data: { amount: p.amount } }));
}

/** `round(share * n)` distinct indexes below n (at least one), at random. */
function pickShare(n: number, share: number): Set<number> {
  const wanted = Math.max(1, Math.round(share * n));
  const picked = new Set<number>();
  while (picked.size < wanted) picked.add(Math.floor(Math.random() * n));
  return picked;
}

/** Paces the producer; no assertion depends on it. */
function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
