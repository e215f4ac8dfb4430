import { randomUUID } from 'node:crypto';

/** Event type of every benchmark event. */
export const BENCH_EVENT = 'order.created';
/** Every payload's JSON is exactly this long, in every scenario and for every system. */
export const PAYLOAD_BYTES = 200;

export interface BenchPayload {
  orderId: string;
  customerId: string;
  amountCents: number;
  currency: string;
  items: Array<{ sku: string; qty: number }>;
  /** `hostNow()` when the producer called publish; 0 outside the latency scenario. */
  sentAt: number;
  note: string;
}

/** The 200-byte payload; `note` is padded so the JSON is exactly `PAYLOAD_BYTES` whatever `sentAt` is. */
export function makePayload(sentAt = 0): BenchPayload {
  const payload: BenchPayload = {
    orderId: 'order-0001234567',
    customerId: 'customer-00042',
    amountCents: 129_900,
    currency: 'EUR',
    items: [
      { sku: 'SKU-1001', qty: 1 },
      { sku: 'SKU-2002', qty: 2 },
    ],
    sentAt,
    note: '',
  };
  payload.note = flatNote(PAYLOAD_BYTES - JSON.stringify(payload).length);
  return payload;
}

const notes = new Map<number, string>();

/**
 * `length` x's as a flat string, as a string parsed from a request body is. V8 14 (Node 24 and later)
 * serialises an object on its fast path only when none of its strings is a rope (`repeat`, a
 * concatenation): one that is makes `JSON.stringify` of the whole payload about 2.5 times slower (0.70
 * against 0.28 µs on the bench host). A rope turns flat only when a full GC gets to it, so with `note`
 * built by `repeat` the same payload was serialised fast in one process and slowly in another, by chance.
 */
function flatNote(length: number): string {
  let note = notes.get(length);
  if (note === undefined) {
    note = JSON.parse(JSON.stringify('x'.repeat(length))) as string;
    notes.set(length, note);
  }
  return note;
}

export const PAYLOAD = makePayload();

/**
 * Milliseconds on the host's monotonic clock (`CLOCK_MONOTONIC`, since boot),
 * with sub-millisecond precision: the same clock in every process on one host.
 * Not `performance.timeOrigin + performance.now()`: `timeOrigin` is the wall
 * clock at each process's start, so two processes started while the wall
 * clock was being slewed disagree by milliseconds (a loaded VM measured a
 * negative latency p50 that way).
 */
export function hostNow(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** The minimal raw entry: event type and JSON data. */
export function minimalFields(json: string): string[] {
  return ['event', BENCH_EVENT, 'data', json];
}

/**
 * A raw entry with the fields eventrail writes, in its order (see the README's
 * wire format): a UUIDv7-shaped id, event, optional key, time, data.
 */
export function eventrailLikeFields(json: string, now: number, key?: string): string[] {
  const id = now.toString(16).padStart(12, '0');
  const uuid = `${id.slice(0, 8)}-${id.slice(8, 12)}-7${randomUUID().slice(15)}`;
  return key === undefined
    ? ['id', uuid, 'event', BENCH_EVENT, 'time', String(now), 'data', json]
    : ['id', uuid, 'event', BENCH_EVENT, 'key', key, 'time', String(now), 'data', json];
}

/** The ordering key of the i-th event when events are spread over `keys` keys. */
export function keyOf(i: number, keys: number): string {
  return `customer-${i % keys}`;
}
