import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import {
  EventrailPublisher,
  InvalidEventDataError,
  partitionForKey,
  PayloadTooLargeError,
  PublishManyError,
  type PublishInput,
  type PublishResult,
} from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';

/**
 * Attacks on `publishMany` serialising data as its runs leave (the walk bounds each event's JSON; only
 * data bounded within `maxPayloadBytes` waits to be serialised). What must hold: an event over
 * `maxPayloadBytes` is refused before anything is sent; data whose getter or proxy answers differently
 * when read again may be refused after runs left, and then `PublishManyError.outcomes` is exact (every
 * event `appended` or `not-appended`, as the stream says), what landed is a prefix per partition, and
 * the cause is typed; nothing accepted is lost or appended twice, getters that publish included.
 */

const PARTITIONS = 4;
const MAX = 4000;
const KEYS = ['a', 'b', 'ключ', '😀', 'k\u0000', 'e'];
const TYPED = [InvalidEventDataError, PayloadTooLargeError];

type Random = () => number;
const int = (random: Random, max: number): number => Math.floor(random() * max);
const pick = <T>(random: Random, list: readonly T[]): T => list[int(random, list.length)];

/** One event of a call: its input, the tag its headers carry (headers are serialised up front), and its partition. */
interface Planned {
  input: PublishInput;
  tag: string;
  partition: number;
}

/** One `publishMany` call and how it settled. */
interface Call {
  label: string;
  planned: Planned[];
  outcome: PublishResult[] | unknown;
}

function planned(label: string, i: number, data: unknown, lane: { key?: string; partition?: number }, id?: string): Planned {
  const tag = `${label}.${i}`;
  const partition = lane.key !== undefined ? partitionForKey(lane.key, PARTITIONS) : (lane.partition ?? 0);
  const input: PublishInput = { event: 'attack.deferred', data, headers: { t: tag }, ...lane };
  if (id !== undefined) input.id = id;
  return { input, tag, partition };
}

function laneOf(random: Random): { key?: string; partition?: number } {
  const r = random();
  if (r < 0.5) return { key: pick(random, KEYS) };
  if (r < 0.8) return { partition: int(random, PARTITIONS) };
  return {};
}

/** Plain data: mostly small, some whose bound is over MAX (serialised up front) but whose JSON fits. */
function plainData(random: Random, i: number): unknown {
  const r = random();
  if (r < 0.1) return { i, s: 'a'.repeat(1000 + int(random, 2900)) };
  if (r < 0.15) return { i, s: '\u0001'.repeat(int(random, 600)), n: -0.0000012345678901234567 };
  if (r < 0.2) return [i, 'é'.repeat(int(random, 800)), null, true, 5e-324];
  return { i, s: 'x'.repeat(int(random, 40)) };
}

const MODES = ['throw', 'grow', 'bigint', 'cycle', 'toJSON-grow', 'undefined', 'shrink', 'proxy-keys'] as const;
type Mode = (typeof MODES)[number];

/**
 * Data that answers `reads` times as plain data, then as `mode` says: throws, grows over MAX, turns
 * into a BigInt or a cycle, into an object whose toJSON grows over MAX, disappears (JSON drops it) or
 * shrinks; or a proxy whose key list grows over MAX after `reads` listings.
 */
function changing(reads: number, mode: Mode): unknown {
  let left = reads;
  if (mode === 'proxy-keys') {
    const many = Array.from({ length: 60 }, (_, k) => `key${k}`);
    return new Proxy({} as Record<string, unknown>, {
      ownKeys: () => (left-- > 0 ? ['a'] : ['a', ...many]),
      getOwnPropertyDescriptor: () => ({ value: 'v'.repeat(100), enumerable: true, configurable: true, writable: true }),
      get: (_, name) => (typeof name === 'string' && name !== 'toJSON' ? 'v'.repeat(100) : undefined),
    });
  }
  return Object.defineProperty({ plain: 1 }, 'v', {
    enumerable: true,
    get: () => {
      if (left-- > 0) return 'v';
      switch (mode) {
        case 'throw':
          throw new Error('gone');
        case 'grow':
          return 'x'.repeat(MAX + 10);
        case 'bigint':
          return 1n;
        case 'cycle': {
          const cycle: Record<string, unknown> = {};
          cycle.self = cycle;
          return cycle;
        }
        case 'toJSON-grow':
          return Object.defineProperty({}, 'toJSON', { value: () => 'x'.repeat(MAX + 10) });
        case 'undefined':
          return undefined;
        default:
          return '';
      }
    },
  });
}

/** The tags of each partition's entries after `since` (its last id before the calls), in stream order, with their offsets. */
async function entriesSince(redis: Redis, keys: EventrailKeys, since: string[]): Promise<Array<Array<{ tag: string; offset: string }>>> {
  return Promise.all(
    since.map(async (last, p) => {
      const entries = await redis.xrange(keys.stream(p), last === '' ? '-' : `(${last}`, '+');
      return entries.map(([offset, fields]) => {
        const headers = fields[fields.indexOf('headers') + 1];
        return { tag: (JSON.parse(headers) as { t: string }).t, offset };
      });
    }),
  );
}

async function lastIds(redis: Redis, keys: EventrailKeys): Promise<string[]> {
  return Promise.all(keys.streams.map(async (stream) => (await redis.xrevrange(stream, '+', '-', 'COUNT', 1))[0]?.[0] ?? ''));
}

/**
 * What breaks the promises for `calls` (sent after `since`): untyped errors, outcomes other than
 * appended or not-appended, outcomes or offsets the stream does not match, an entry twice, and
 * appended events of a partition that are not a prefix of what the call sent it.
 */
function problemsOf(calls: Call[], stream: Array<Array<{ tag: string; offset: string }>>, kinds: Record<string, number>): string[] {
  const problems: string[] = [];
  for (const { label, planned: events, outcome } of calls) {
    const appended = new Array<boolean>(events.length).fill(false);
    const offsets: Array<string | undefined> = new Array(events.length);
    if (Array.isArray(outcome)) {
      kinds.resolved++;
      (outcome as PublishResult[]).forEach((result, i) => {
        appended[i] = true;
        offsets[i] = result.offset;
      });
    } else if (outcome instanceof PublishManyError) {
      kinds.refusedMidway++;
      if (!TYPED.some((type) => outcome.cause instanceof type)) problems.push(`${label}: midway cause ${told(outcome.cause)}`);
      outcome.outcomes.forEach((o, i) => {
        if (o !== 'appended' && o !== 'not-appended') problems.push(`${label}: outcome ${i} is ${o}`);
        appended[i] = o === 'appended';
        offsets[i] = outcome.results[i]?.offset;
      });
    } else if (TYPED.some((type) => outcome instanceof type)) kinds.refusedUpFront++;
    else problems.push(`${label}: rejected untyped: ${told(outcome)}`);
    for (let p = 0; p < PARTITIONS; p++) {
      const ofPartition = events.map((e, i) => ({ e, i })).filter(({ e }) => e.partition === p);
      const landed = stream[p].filter((entry) => entry.tag.startsWith(`${label}.`));
      const expected = ofPartition.filter(({ i }) => appended[i]);
      const firstMissing = ofPartition.findIndex(({ i }) => !appended[i]);
      if (firstMissing >= 0 && ofPartition.slice(firstMissing).some(({ i }) => appended[i]))
        problems.push(`${label} p${p}: appended events are not a prefix of the partition's`);
      if (landed.map((l) => l.tag).join() !== expected.map(({ e }) => e.tag).join())
        problems.push(`${label} p${p}: the stream holds [${landed.map((l) => l.tag)}], outcomes say [${expected.map(({ e }) => e.tag)}]`);
      for (const { e, i } of expected) {
        const entry = landed.find((l) => l.tag === e.tag);
        if (entry && offsets[i] !== entry.offset) problems.push(`${label}: ${e.tag} answered offset ${offsets[i]}, is at ${entry.offset}`);
      }
    }
  }
  return problems;
}

function told(error: unknown): string {
  return error instanceof Error ? `${error.constructor.name}: ${error.message.slice(0, 160)}` : String(error);
}

async function settle(call: Promise<PublishResult[]>): Promise<PublishResult[] | unknown> {
  return call.then(
    (results) => results,
    (error: unknown) => error,
  );
}

describe('the attack checker, on hand-made records', () => {
  const events = [0, 1, 2].map((i) => planned('h', i, { i }, { partition: 0 }));
  const stream = (...entries: Array<[string, string]>): Array<Array<{ tag: string; offset: string }>> => [
    entries.map(([tag, offset]) => ({ tag, offset })),
    [],
    [],
    [],
  ];
  const results = (...offsets: string[]): PublishResult[] => offsets.map((offset) => ({ id: '', partition: 0, offset }));
  const midway = (
    outcomes: Array<'appended' | 'not-appended' | 'unknown'>,
    offsets: string[],
    cause: unknown = new PayloadTooLargeError('e', 2, 1),
  ) => new PublishManyError(outcomes, results(...offsets), cause);
  const check = (outcome: unknown, landed: Array<Array<{ tag: string; offset: string }>>): string[] =>
    problemsOf([{ label: 'h', planned: events, outcome }], landed, {});

  it('passes what keeps the promises, and names each way of breaking them', () => {
    expect(check(results('1-0', '1-1', '1-2'), stream(['h.0', '1-0'], ['h.1', '1-1'], ['h.2', '1-2']))).toEqual([]);
    expect(check(midway(['appended', 'not-appended', 'not-appended'], ['1-0']), stream(['h.0', '1-0']))).toEqual([]);
    expect(check(new InvalidEventDataError('e', 'data', 'bad'), stream())).toEqual([]);
    // An entry twice, one missing, one at another offset.
    expect(check(results('1-0', '1-1', '1-2'), stream(['h.0', '1-0'], ['h.0', '1-3'], ['h.1', '1-1'], ['h.2', '1-2']))).toHaveLength(1);
    expect(check(results('1-0', '1-1', '1-2'), stream(['h.0', '1-0'], ['h.2', '1-2']))).toHaveLength(1);
    expect(check(results('1-0', '1-1', '1-2'), stream(['h.0', '1-0'], ['h.1', '1-5'], ['h.2', '1-2']))).toHaveLength(1);
    // An unknown outcome, a gap before an appended event, an untyped cause, an untyped rejection.
    expect(check(midway(['appended', 'unknown', 'not-appended'], ['1-0']), stream(['h.0', '1-0']))).toHaveLength(1);
    expect(check(midway(['not-appended', 'appended', 'not-appended'], ['', '1-1']), stream(['h.1', '1-1']))).toHaveLength(1);
    expect(check(midway(['appended', 'not-appended', 'not-appended'], ['1-0'], new TypeError('x')), stream(['h.0', '1-0']))).toHaveLength(
      1,
    );
    expect(check(new TypeError('x'), stream())).toHaveLength(1);
  });
});

describe('publishMany serialising data as its runs leave, attacked', () => {
  let primary: RedisServer;
  let replica: RedisServer;
  let redis: Redis;
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    primary = await startRedisServer(undefined, ['--repl-diskless-sync-delay', '0']);
    replica = await startRedisServer(undefined, ['--replicaof', '127.0.0.1', String(primary.port)]);
    redis = new Redis(primary.url);
    const replicaClient = new Redis(replica.url);
    await waitFor(async () => /master_link_status:up/.test(await replicaClient.info('replication')), 'replica in sync');
    replicaClient.disconnect();
  });
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });
  afterAll(async () => {
    redis?.disconnect();
    await replica?.stop();
    await primary?.stop();
  });

  const start = async (dedupWindowMs: number): Promise<{ publisher: EventrailPublisher; keys: EventrailKeys }> => {
    const prefix = uniquePrefix('deferred');
    const app = await createApp({
      redis: primary.url,
      prefix,
      partitions: PARTITIONS,
      maxPayloadBytes: MAX,
      dedupWindowMs,
      replication: { replicas: 1, timeoutMs: 10_000 },
    });
    apps.push(app);
    const publisher = app.get(EventrailPublisher);
    // The first publishMany of a process asks whether scripts run; batches after it serialise as their runs leave.
    await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n }, headers: { t: `warm.${n}` } })));
    return { publisher, keys: new EventrailKeys(prefix, PARTITIONS) };
  };

  it('refuses an event over maxPayloadBytes before anything is sent when a toJSON makes its JSON bigger than its members (non-enumerable, an array own, an Array subclass, nested), wherever it is in a 300-event batch over 4 partitions', async () => {
    // Measured before the fix in validate-event.ts (the walk counted members, not what toJSON answers):
    // 12 of 12 calls rejected with PublishManyError (cause PayloadTooLargeError, found as the run was
    // built) instead of PayloadTooLargeError; with the event at 299, 250 events were appended first
    // (at 0 and 150, none had left yet).
    const { publisher, keys } = await start(0);
    const big = (): string => 'x'.repeat(MAX + 1);
    class Listing extends Array<number> {
      toJSON(): string {
        return big();
      }
    }
    const shapes: Array<[string, () => unknown]> = [
      ['non-enumerable toJSON', () => Object.defineProperty({ a: 1 }, 'toJSON', { value: big })],
      ['array own toJSON', () => Object.assign([1, 2], { toJSON: big })],
      ['Array subclass', () => Listing.from([1])],
      ['nested', () => ({ list: [Object.defineProperty({}, 'toJSON', { value: big })] })],
    ];
    const found: string[] = [];
    for (const [name, make] of shapes) {
      for (const at of [0, 150, 299]) {
        const random = seededRandom(at + 1);
        const label = `tojson-${name}-${at}`;
        const events = Array.from({ length: 300 }, (_, i) =>
          planned(label, i, i === at ? make() : { i }, i % 3 === 0 ? { key: pick(random, KEYS) } : { partition: i % PARTITIONS }),
        );
        const since = await lastIds(redis, keys);
        const outcome = await settle(publisher.publishMany(events.map((e) => e.input)));
        const landed = (await entriesSince(redis, keys, since)).flat().length;
        if (!(outcome instanceof PayloadTooLargeError) || landed > 0) found.push(`${name} at ${at}: ${told(outcome)}, ${landed} appended`);
      }
    }
    expect(found).toEqual([]);
  });

  it('60 generated batches (sizes, keys, partitions, ids with and without dedup, replicated durability) with data that changes at its 1st to 5th read: typed refusals, exact outcomes, a prefix per partition, every accepted event once', async () => {
    const kinds = { resolved: 0, refusedUpFront: 0, refusedMidway: 0 };
    const problems: string[] = [];
    for (const dedupWindowMs of [60_000, 0]) {
      const { publisher, keys } = await start(dedupWindowMs);
      for (let seed = 1; seed <= 30; seed++) {
        const random = seededRandom(1000 * (dedupWindowMs > 0 ? 1 : 2) + seed);
        const label = `gen-${dedupWindowMs}-${seed}`;
        const count = 2 + int(random, random() < 0.3 ? 700 : 200);
        const hostile = new Set(Array.from({ length: int(random, 3) }, () => int(random, count)));
        const events = Array.from({ length: count }, (_, i) => {
          const data = hostile.has(i) ? changing(int(random, 6), pick(random, MODES)) : plainData(random, i);
          return planned(label, i, data, laneOf(random), random() < 0.3 ? `${label}-id-${i}` : undefined);
        });
        const durability = random() < 0.25 ? ('replicated' as const) : undefined;
        const since = await lastIds(redis, keys);
        const outcome = await settle(
          publisher.publishMany(
            events.map((e) => e.input),
            { durability },
          ),
        );
        const found = problemsOf([{ label, planned: events, outcome }], await entriesSince(redis, keys, since), kinds);
        problems.push(...found.map((f) => `seed ${seed} (window ${dedupWindowMs}): ${f}`));
      }
    }
    console.log(`generated: ${JSON.stringify(kinds)}`);
    expect(problems.slice(0, 10)).toEqual([]);
    // Each way was taken.
    expect(kinds.resolved).toBeGreaterThan(0);
    expect(kinds.refusedUpFront).toBeGreaterThan(0);
    expect(kinds.refusedMidway).toBeGreaterThan(0);
  });

  it('a batch with ids refused midway and sent again whole (as the outbox relay does) lands every event once, in order, the first sending answered as duplicates', async () => {
    const { publisher, keys } = await start(60_000);
    const problems: string[] = [];
    let midway = 0;
    for (let seed = 1; seed <= 12; seed++) {
      const random = seededRandom(5000 + seed);
      const label = `relay-${seed}`;
      const count = 150 + int(random, 400);
      const at = int(random, count);
      const lanes = Array.from({ length: count }, () => laneOf(random));
      const batch = (hostile: boolean): Planned[] =>
        lanes.map((lane, i) =>
          planned(label, i, hostile && i === at ? changing(1, pick(random, ['throw', 'grow'])) : { i }, lane, `${label}:${i}`),
        );
      const since = await lastIds(redis, keys);
      const first = await settle(publisher.publishMany(batch(true).map((e) => e.input)));
      const before = first instanceof PublishManyError ? first.outcomes : undefined;
      if (before) midway++;
      const again = await settle(publisher.publishMany(batch(false).map((e) => e.input)));
      if (!Array.isArray(again)) {
        problems.push(`seed ${seed}: the second sending rejected: ${told(again)}`);
        continue;
      }
      // Once each, in order per partition; duplicates exactly where the first sending appended.
      problems.push(
        ...problemsOf([{ label, planned: batch(false), outcome: again }], await entriesSince(redis, keys, since), { resolved: 0 }),
      );
      const duplicates = (again as PublishResult[]).map((r) => r.duplicate === true);
      const expected = before ? before.map((o) => o === 'appended') : duplicates.map(() => false);
      if (duplicates.join() !== expected.join()) problems.push(`seed ${seed}: duplicates are not what the first sending appended`);
    }
    expect(problems.slice(0, 10)).toEqual([]);
    expect(midway).toBeGreaterThan(0);
  });

  it('getters that publish (publish and publishMany, one with data that changes) while the walk or the serialisation reads them: every call settles as promised, nothing lost or doubled, order kept per call and partition', async () => {
    const kinds = { resolved: 0, refusedUpFront: 0, refusedMidway: 0 };
    const problems: string[] = [];
    const { publisher, keys } = await start(60_000);
    /** Where the getters published from: the walk of `prepare`, or JSON.stringify as a run was built. */
    const from = { walk: 0, serialisation: 0 };
    for (let seed = 1; seed <= 24; seed++) {
      const random = seededRandom(9000 + seed);
      const calls: Call[] = [];
      const pending: Array<Promise<void>> = [];
      const spawnCall = (label: string, events: Planned[]): void => {
        const call: Call = { label, planned: events, outcome: undefined };
        calls.push(call);
        pending.push(settle(publisher.publishMany(events.map((e) => e.input))).then((o) => void (call.outcome = o)));
      };
      const lone: Array<{ tag: string; partition: number; result: Promise<unknown> }> = [];
      /** Data whose getter, at its `on`-th read, publishes a batch (maybe with changing data) and a lone event. */
      const publishing = (on: number, depth: number): unknown => {
        let reads = 0;
        return Object.defineProperty({}, 'v', {
          enumerable: true,
          get: () => {
            if (++reads === on && depth < 2) {
              from[new Error().stack?.includes('JSON.stringify') ? 'serialisation' : 'walk']++;
              const label = `re-${seed}-${calls.length}`;
              const size = 2 + int(random, 300);
              const inner = Array.from({ length: size }, (_, i) => {
                const r = random();
                const data =
                  r < 0.004 ? changing(int(random, 4), pick(random, MODES)) : r < 0.02 ? publishing(1 + int(random, 3), depth + 1) : { i };
                return planned(label, i, data, laneOf(random), random() < 0.3 ? `${label}-id-${i}` : undefined);
              });
              spawnCall(label, inner);
              const tag = `lone-${label}`;
              const lane = laneOf(random);
              const partition = lane.key !== undefined ? partitionForKey(lane.key, PARTITIONS) : (lane.partition ?? 0);
              lone.push({
                tag,
                partition,
                result: publisher.publish('attack.lone', { tag }, { ...lane, headers: { t: tag } }).catch((e) => e),
              });
            }
            return 'v';
          },
        });
      };
      const since = await lastIds(redis, keys);
      const label = `outer-${seed}`;
      const count = 2 + int(random, 400);
      const events = Array.from({ length: count }, (_, i) => {
        const r = random();
        const data = r < 0.03 ? publishing(1 + int(random, 3), 0) : r < 0.04 ? changing(int(random, 4), pick(random, MODES)) : { i };
        return planned(label, i, data, laneOf(random), random() < 0.3 ? `${label}-id-${i}` : undefined);
      });
      spawnCall(label, events);
      // Calls spawned from getters join `pending` while it is awaited.
      for (let settled = 0; settled < pending.length; settled++) await pending[settled];
      const loneResults = await Promise.all(lone.map((one) => one.result));
      const stream = await entriesSince(redis, keys, since);
      problems.push(...problemsOf(calls, stream, kinds).map((f) => `seed ${seed}: ${f}`));
      for (const [n, one] of lone.entries()) {
        const result = loneResults[n];
        const found = stream[one.partition].filter((e) => e.tag === one.tag).length;
        if (result instanceof Error || found !== 1) problems.push(`seed ${seed}: lone ${one.tag} ${told(result)}, ${found} in the log`);
      }
    }
    console.log(`reentrant: ${JSON.stringify(kinds)}, published from ${JSON.stringify(from)}`);
    expect(problems.slice(0, 10)).toEqual([]);
    expect(kinds.resolved).toBeGreaterThan(24);
    expect(from.walk).toBeGreaterThan(0);
    expect(from.serialisation).toBeGreaterThan(0);
  });

  it('payloads at and around maxPayloadBytes, with bounds under and over it: at the limit appended, one byte over refused before anything is sent', async () => {
    const { publisher, keys } = await start(0);
    // JSON bytes and the walk's bound: '\u0001' is 6 bytes in JSON and 6 in the bound, 'a' 1 and 6.
    const cases: Array<[string, unknown, boolean]> = [
      ['666 controls: 3998 bytes, bound 3998 (waits)', '\u0001'.repeat(666), true],
      ['[666 controls]: 4000 bytes, bound 4001 (up front)', ['\u0001'.repeat(666)], true],
      ['667 controls: 4004 bytes, bound 4004', '\u0001'.repeat(667), false],
      ['3998 a: 4000 bytes', 'a'.repeat(3998), true],
      ['3999 a: 4001 bytes', 'a'.repeat(3999), false],
      ['1999 é: 4000 bytes', 'é'.repeat(1999), true],
      ['2000 é: 4002 bytes', 'é'.repeat(2000), false],
      ['999 astral and an a: 3999 bytes', '😀'.repeat(999) + 'a', true],
      ['1000 astral: 4002 bytes', '😀'.repeat(1000), false],
      ['700 lone surrogates (escaped): 4202 bytes, bound 4202', '\ud800'.repeat(700), false],
      ['666 lone surrogates: 3998 bytes, bound 3998 (waits)', '\udc00'.repeat(666), true],
      ['153 numbers of 25 characters: 3979 bytes, bound 4133', Array<number>(153).fill(-0.0000012345678901234567), true],
    ];
    const found: string[] = [];
    for (const [name, data, fits] of cases) {
      for (const at of [0, 150, 299]) {
        const label = `edge-${cases.findIndex((c) => c[0] === name)}-${at}`;
        const events = Array.from({ length: 300 }, (_, i) => planned(label, i, i === at ? data : { i }, { partition: i % PARTITIONS }));
        const since = await lastIds(redis, keys);
        const outcome = await settle(publisher.publishMany(events.map((e) => e.input)));
        const landed = (await entriesSince(redis, keys, since)).flat().length;
        const ok = fits ? Array.isArray(outcome) && landed === 300 : outcome instanceof PayloadTooLargeError && landed === 0;
        if (!ok) found.push(`${name} at ${at}: ${Array.isArray(outcome) ? 'appended' : told(outcome)}, ${landed} in the log`);
      }
    }
    expect(found).toEqual([]);
  });
});
