/** Helpers for Redis stream ids (`<ms>-<seq>`). Offsets are exclusive: the id of the last entry done. */

export const STREAM_START = '0-0';
/** The largest part of a stream id (64 bits unsigned): `<ms>-MAX_SEQ` is the last id of a millisecond. */
export const MAX_SEQ = '18446744073709551615';
const MAX_PART = BigInt(MAX_SEQ);
const SHAPE = /^\d{1,20}-\d{1,20}$/;

/** True for a complete stream id `<ms>-<seq>` that Redis accepts: both parts fit in 64 bits unsigned. */
export function isStreamId(value: unknown): value is string {
  if (typeof value !== 'string' || !SHAPE.test(value)) return false;
  const [ms, seq] = splitId(value);
  return ms <= MAX_PART && seq <= MAX_PART;
}

/** The id just before `id`, so that reading after it starts at `id` itself. */
export function previousStreamId(id: string): string {
  const [ms, seq] = splitId(id);
  if (seq > 0n) return `${ms}-${seq - 1n}`;
  if (ms > 0n) return `${ms - 1n}-${MAX_SEQ}`;
  return STREAM_START;
}

/** The smallest id after `id`. */
export function nextStreamId(id: string): string {
  const [ms, seq] = splitId(id);
  return seq < MAX_PART ? `${ms}-${seq + 1n}` : `${ms + 1n}-0`;
}

/** The offset that makes a group start at the first entry published at or after `time`. */
export function offsetBeforeTime(time: Date): string {
  return previousStreamId(`${time.getTime()}-0`);
}

export function compareStreamIds(a: string, b: string): number {
  const [am, as] = splitId(a);
  const [bm, bs] = splitId(b);
  if (am !== bm) return am < bm ? -1 : 1;
  if (as !== bs) return as < bs ? -1 : 1;
  return 0;
}

function splitId(id: string): [bigint, bigint] {
  const dash = id.indexOf('-');
  return [BigInt(id.slice(0, dash)), BigInt(id.slice(dash + 1))];
}
