import { randomUUID } from 'node:crypto';
import { fnv1a32 } from './partitioner';

let lastMs = -1;
let timeDigits = '';

/**
 * A UUIDv7: 48 bits of Unix milliseconds, then random bits, so ids sort by
 * publish time. Built from `randomUUID()` (which batches its entropy) by
 * overwriting the time and version digits; the time part is formatted once
 * per millisecond.
 */
export function newEventId(now = Date.now()): string {
  if (now !== lastMs) {
    lastMs = now;
    const hex = now.toString(16).padStart(12, '0');
    timeDigits = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7`;
  }
  return timeDigits + randomUUID().slice(15);
}

/**
 * The 32-bit tag that sets the derived ids of one log (one `prefix`) apart
 * from another's: FNV-1a 32 of the prefix's UTF-8 bytes, as 8 hex digits.
 * Two logs sharing one Redis (or one inbox table) then give the same stream
 * id in the same partition different event ids, unless their prefixes
 * collide in 32 bits.
 */
export function logTag(prefix: string): string {
  return fnv1a32(prefix).toString(16).padStart(8, '0');
}

/** Partitions a derived id can tell apart: the partition number has 10 bits (the option allows at most 1024). */
export const DERIVED_ID_PARTITIONS = 1024;
const MS_LIMIT = 2 ** 48;
const SEQ_LIMIT = 2 ** 32;

/** Two hex digits of every byte: the sequence digits are looked up, not formatted. */
const HEX_BYTE = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));
const HEX_DIGIT = Array.from({ length: 16 }, (_, digit) => digit.toString(16));

// The digits before the sequence's low 16 bits, formatted once per (millisecond, partition, sequence bits
// 16-29): a batch mostly shares them all.
let derivedMs = '';
let derivedPartition = -1;
let derivedMiddle = -1;
let derivedPrefix = '';

/**
 * The event id of an entry that was appended without one (eventrail's own
 * `publish`, or a producer in another language that writes only `event` and
 * `data`): a function of where the entry is, so every reader, every time,
 * gets the same id, and two entries of one log never share one.
 *
 * It is shaped like a UUIDv7 (RFC 9562), so it sorts by time like a
 * generated one:
 *
 * | bits | content |
 * |---|---|
 * | 48 | the stream id's milliseconds (modulo 2^48) |
 * | 4  | version `7` |
 * | 10 | partition |
 * | 32 | the stream id's sequence number (modulo 2^32), split by the variant bits `10` after its first 2 bits |
 * | 32 | `logTag(prefix)` |
 *
 * Unique within a log as long as no entry's sequence number reaches 2^32
 * (four billion entries in one millisecond: `XADD *` cannot get there) and
 * no millisecond part reaches 2^48 (the year 10889).
 */
export function derivedEventId(tag: string, partition: number, streamId: string): string {
  const dash = streamId.indexOf('-');
  const ms = streamId.slice(0, dash);
  const seqText = streamId.slice(dash + 1);
  const seq = seqText.length > 15 ? Number(BigInt(seqText) % BigInt(SEQ_LIMIT)) : Number(seqText) % SEQ_LIMIT;
  // rand_a: 10 bits of partition, then the sequence's top 2 bits (zero below 2^30, so cached with the time).
  const high = seq >>> 30;
  const middle = (seq >>> 16) & 0x3fff;
  if (ms !== derivedMs || partition !== derivedPartition || middle !== derivedMiddle || high !== 0) {
    const prefix = timeAndPartition(ms, partition, high) + variantDigits(middle);
    if (high !== 0) return prefix + low(seq, tag);
    derivedMs = ms;
    derivedPartition = partition;
    derivedMiddle = middle;
    derivedPrefix = prefix;
  }
  return derivedPrefix + low(seq, tag);
}

/**
 * `tttttttt-tttt-7ppp-`: the milliseconds' 48 bits, the version, then the
 * partition's 10 bits and `high` (2 bits), from byte lookups. At a few
 * thousand events a second nearly every id starts a new millisecond, and
 * `toString(16)`, `padStart` and `slice` cost a publish or a delivery about
 * 2 µs more (measured in the latency bench's profiles).
 */
function timeAndPartition(ms: string, partition: number, high: number): string {
  const value = ms.length > 15 ? Number(BigInt(ms) % BigInt(MS_LIMIT)) : Number(ms) % MS_LIMIT;
  // Top and bottom 24 bits: both fit the 32-bit operators.
  const top = Math.floor(value / 0x1000000);
  const bottom = value - top * 0x1000000;
  const randA = ((partition & 0x3ff) << 2) | high;
  return (
    HEX_BYTE[top >>> 16] +
    HEX_BYTE[(top >>> 8) & 0xff] +
    HEX_BYTE[top & 0xff] +
    HEX_BYTE[bottom >>> 16] +
    '-' +
    HEX_BYTE[(bottom >>> 8) & 0xff] +
    HEX_BYTE[bottom & 0xff] +
    '-7' +
    HEX_DIGIT[randA >>> 8] +
    HEX_BYTE[randA & 0xff] +
    '-'
  );
}

/** `vvvv-`: the variant nibble `10xx` with the sequence's bits 29–28, then its bits 27–16 (`middle` holds bits 29–16). */
function variantDigits(middle: number): string {
  const variant = 0x8000 | middle;
  return `${HEX_BYTE[variant >>> 8]}${HEX_BYTE[variant & 0xff]}-`;
}

/** The sequence's low 16 bits and the tag: the only digits most ids of a batch do not share (12 characters, one flat string). */
function low(seq: number, tag: string): string {
  return HEX_BYTE[(seq >>> 8) & 0xff] + HEX_BYTE[seq & 0xff] + tag;
}
