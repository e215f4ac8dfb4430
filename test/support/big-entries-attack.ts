import type { Cluster, Redis } from 'ioredis';
import { type EventrailPublisher, partitionForKey, type PublishInput } from '../../lib';
import { BIG_ENTRY_BYTES, FRAME_BYTES } from '../../lib/redis/big-entries';
import type { EventrailKeys } from '../../lib/redis/keys';
import { encodeFields } from '../../lib/wire/codec';
import { entrySizes } from './entry-sizes';

/**
 * Generated publishes that land entries within a few bytes of the big-entry line, every way eventrail
 * appends, and the check of a partition's index against the entries read back: shared by the
 * big-entries attacks on one Redis and on a Cluster.
 */

/** The longest stream id: what the rule counts for every entry's id (index-big.lua, big-entries.ts). */
const ID_BYTES = 41;

type Random = () => number;
const int = (random: Random, max: number): number => Math.floor(random() * max);
const pick = <T>(random: Random, list: readonly T[]): T => list[int(random, list.length)];

/** Characters of data strings, with the UTF-8 bytes of each in the entry's JSON: escapes, astral pairs, lone surrogates. */
const DATA_CHARS: Array<[string, number]> = [
  ['a', 1],
  ['é', 2],
  ['€', 3],
  ['😀', 4],
  ['"', 2],
  ['\u0001', 6],
  ['\ud800', 6],
  ['\u2028', 3],
];
const EVENTS = ['big', 'événement', 'ev\ud800t', 'e😀'];
/** Keys: none, multi-byte, astral, a lone surrogate (sent as 3 bytes), a long one of 3-byte characters. */
const KEYS = [undefined, 'k', 'ключ', '😀', 'x\udfff', '€'.repeat(1000)];

/** One planned event: what it is sent as, and the rule's weight of the entry it must make. */
export interface NearTheLine {
  input: PublishInput;
  partition: number;
  /** The entry's bytes as the rule counts them (fields, a frame each and the id's, the longest id). */
  ruleBytes: number;
}

function ruleBytesOf(fields: readonly string[]): number {
  return fields.reduce((sum, field) => sum + Buffer.byteLength(field) + FRAME_BYTES, ID_BYTES + FRAME_BYTES);
}

/**
 * An event whose entry weighs `target` bytes by the rule (when the other fields leave room): headers,
 * key, id and name generated, then data filled with multi-byte and escaped characters and topped up
 * with single bytes. `withIds` gives ids; `partitions` picks a keyless one's partition.
 */
export function eventNear(random: Random, n: number, target: number, partitions: number, withIds: boolean, keyless?: number): NearTheLine {
  const key = keyless === undefined ? pick(random, KEYS) : undefined;
  const event = pick(random, EVENTS);
  const headers = random() < 0.3 ? { trace: 'ü'.repeat(int(random, 2000)), 'h-😀': '\ud800' } : undefined;
  const id = withIds && random() < 0.6 ? `id-ü-${n}-${'€'.repeat(int(random, 60))}` : undefined;
  const partition = key !== undefined ? partitionForKey(key, partitions) : (keyless ?? int(random, partitions));
  // Fields as the publisher writes them (time: 13 digits, as any Date.now() of these years).
  const fieldsOf = (data: string): string[] =>
    encodeFields({
      id,
      event,
      key,
      time: id === undefined ? undefined : Date.now(),
      data: JSON.stringify(data),
      headers: headers && JSON.stringify(headers),
    });
  let data = '';
  const [char, bytes] = pick(random, DATA_CHARS);
  const room = target - ruleBytesOf(fieldsOf(''));
  // About half the room in one kind of character, the rest in single bytes, to land on `target` exactly.
  while ((data.length + 1) * bytes <= room / 2) data += char;
  data += 'a'.repeat(Math.max(0, room - ruleBytesOf(fieldsOf(data)) + ruleBytesOf(fieldsOf(''))));
  const input: PublishInput = { event, data, ...(key !== undefined ? { key } : { partition }) };
  if (headers) input.headers = headers;
  if (id) input.id = id;
  return { input, partition, ruleBytes: ruleBytesOf(fieldsOf(data)) };
}

/** Targets: a third within 8 bytes of the line, a third within 1 KiB, the rest far under or far over. */
export function targetNear(random: Random): number {
  const r = random();
  if (r < 0.35) return BIG_ENTRY_BYTES - 8 + int(random, 17);
  if (r < 0.7) return BIG_ENTRY_BYTES - 1024 + int(random, 2049);
  if (r < 0.9) return 200 + int(random, 4000);
  return BIG_ENTRY_BYTES + int(random, 100_000);
}

const WAYS = ['lone', 'concurrent', 'many', 'huge'] as const;

/**
 * Publishes `events` every way (each of them first, then as `random` picks): lone publishes awaited
 * one by one, concurrent ones (a coalesced tick), publishMany of a few, and of hundreds (guarded runs
 * of several partitions), keyed and keyless, of mixed widths. Answers how many went each way.
 */
export async function publishEveryWay(
  publisher: EventrailPublisher,
  events: NearTheLine[],
  random: Random,
): Promise<Record<string, number>> {
  const ways = { lone: 0, concurrent: 0, many: 0, huge: 0 };
  for (let i = 0, chunk = 0; i < events.length; chunk++) {
    const r = random();
    const way = chunk < WAYS.length ? WAYS[chunk] : r < 0.15 ? 'lone' : r < 0.3 ? 'concurrent' : r < 0.85 ? 'many' : 'huge';
    const count = Math.min(events.length - i, way === 'huge' ? 200 + int(random, 300) : 1 + int(random, 40));
    const slice = events.slice(i, i + count).map((e) => e.input);
    if (way === 'lone') for (const one of slice) await publisher.publish(one.event, one.data, one);
    else if (way === 'concurrent') await Promise.all(slice.map((one) => publisher.publish(one.event, one.data, one)));
    else await publisher.publishMany(slice);
    ways[way] += count;
    i += count;
  }
  return ways;
}

/**
 * Runs cut by bytes rather than by count: `publishMany` of 150 keyless events to one partition,
 * every other one of 100 KB (past RUN_BYTES, in UTF-16 units, within one run of 128), and a tick of 1100 concurrent
 * publishes (past the 1000 events of a coalesced run), all the others near the line.
 */
export async function publishPastRunLimits(publisher: EventrailPublisher, random: Random, partitions: number, from: number): Promise<void> {
  const cut = Array.from({ length: 150 }, (_, i) =>
    eventNear(random, from + i, i % 2 === 0 ? 100_000 : BIG_ENTRY_BYTES - 4 + int(random, 9), partitions, false, 0),
  );
  await publisher.publishMany(cut.map((e) => e.input));
  const crowd = Array.from({ length: 1100 }, (_, i) =>
    eventNear(random, from + 150 + i, BIG_ENTRY_BYTES - 4 + int(random, 9), partitions, false, 1),
  );
  await Promise.all(crowd.map(({ input }) => publisher.publish(input.event, input.data, input)));
}

/** The entries of a partition the index should hold (big by the rule, read back from Redis) against what it holds. */
export async function indexMismatch(
  redis: Redis | Cluster,
  keys: EventrailKeys,
  partition: number,
): Promise<{ missing: string[]; extra: string[]; big: number; entries: number; onTheLine: number; justOver: number }> {
  const sizes = await entrySizes(redis, keys.stream(partition));
  const indexed = new Set(await redis.zrange(keys.bigEntries(partition), '0', '-1'));
  const big = [...sizes].filter(([id, bytes]) => bytes - id.length + ID_BYTES > BIG_ENTRY_BYTES).map(([id]) => id);
  const bigSet = new Set(big);
  return {
    missing: big.filter((id) => !indexed.has(id)).map((id) => `${id} (${sizes.get(id)! - id.length + ID_BYTES} B)`),
    extra: [...indexed]
      .filter((id) => !bigSet.has(id))
      .map((id) => `${id} (${sizes.has(id) ? sizes.get(id)! - id.length + ID_BYTES : 'gone'} B)`),
    big: big.length,
    entries: sizes.size,
    onTheLine: [...sizes].filter(([id, bytes]) => bytes - id.length + ID_BYTES === BIG_ENTRY_BYTES).length,
    justOver: [...sizes].filter(([id, bytes]) => bytes - id.length + ID_BYTES === BIG_ENTRY_BYTES + 1).length,
  };
}
