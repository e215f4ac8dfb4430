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

/**
 * Orders two stream ids. Called for every batch on the consumer's hot path,
 * so the ids Redis hands out (parts without leading zeros) are compared
 * digit by digit, allocating nothing; anything else (a part written `007`)
 * goes through BigInt.
 */
export function compareStreamIds(a: string, b: string): number {
  if (a === b) return 0;
  const ad = a.indexOf('-');
  const bd = b.indexOf('-');
  if (ad > 0 && bd > 0 && canonical(a, 0, ad) && canonical(a, ad + 1, a.length) && canonical(b, 0, bd) && canonical(b, bd + 1, b.length)) {
    return comparePart(a, 0, ad, b, 0, bd) || comparePart(a, ad + 1, a.length, b, bd + 1, b.length);
  }
  const [am, as] = splitId(a);
  const [bm, bs] = splitId(b);
  if (am !== bm) return am < bm ? -1 : 1;
  if (as !== bs) return as < bs ? -1 : 1;
  return 0;
}

/** Digits only, and no leading zero unless the part is `0`. */
function canonical(id: string, from: number, to: number): boolean {
  if (to <= from || (id.charCodeAt(from) === 48 && to - from > 1)) return false;
  for (let i = from; i < to; i++) {
    const c = id.charCodeAt(i);
    if (c < 48 || c > 57) return false;
  }
  return true;
}

/** Compares two canonical decimal parts: the longer is larger, then digit by digit. */
function comparePart(a: string, af: number, at: number, b: string, bf: number, bt: number): number {
  if (at - af !== bt - bf) return at - af < bt - bf ? -1 : 1;
  for (let i = 0; i < at - af; i++) {
    const d = a.charCodeAt(af + i) - b.charCodeAt(bf + i);
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  return 0;
}

function splitId(id: string): [bigint, bigint] {
  const dash = id.indexOf('-');
  return [BigInt(id.slice(0, dash)), BigInt(id.slice(dash + 1))];
}
