import type { EventrailRedis } from '../redis/eventrail-redis';
import { STREAM_START } from './stream-id';

/**
 * Lag is counted entry by entry (streams have no range count). Each side of
 * the committed offset is counted up to this many entries; past it on both
 * sides the lag is reported as capped.
 */
export const LAG_COUNT_CAP = 10_000;
const PAGE = 1_000;

interface Side {
  count: number;
  /** XRANGE start of the next page. */
  from: string;
  done: boolean;
}

/**
 * Entries after `after` in a partition. Counts them when there are few (one
 * XRANGE in the common case); when there are many, also counts the entries up
 * to `after` and takes them from the length, whichever side ends first, so a
 * large backlog behind a short history (a group far behind, or one that never
 * started) is still exact. Capped only when both sides pass `cap`.
 */
export async function countEntriesAfter(
  redis: EventrailRedis,
  partition: number,
  after: string,
  cap = LAG_COUNT_CAP,
): Promise<{ lag: number; capped: boolean }> {
  const stream = redis.keys.stream(partition);
  // Nothing committed yet: every entry is after the offset.
  if (after === STREAM_START) return { lag: await redis.client.xlen(stream), capped: false };
  const forward: Side = { count: 0, from: `(${after}`, done: false };
  await readPage(redis, stream, forward, '+', cap);
  if (forward.done) return { lag: forward.count, capped: false };

  const backward: Side = { count: 0, from: '-', done: false };
  const length = redis.client.xlen(stream);
  length.catch(() => undefined); // awaited below, or not needed when the forward count ends first
  while (forward.count < cap || backward.count < cap) {
    await Promise.all([readPage(redis, stream, forward, '+', cap), readPage(redis, stream, backward, after, cap)]);
    if (forward.done) return { lag: forward.count, capped: false };
    if (backward.done) return { lag: Math.max(0, (await length) - backward.count), capped: false };
  }
  await length;
  return { lag: forward.count, capped: true };
}

/** Counts one more page of a side, up to `cap`; `done` once the range has no more entries. */
async function readPage(redis: EventrailRedis, stream: string, side: Side, end: string, cap: number): Promise<void> {
  if (side.done || side.count >= cap) return;
  const want = Math.min(PAGE, cap - side.count);
  const page = await redis.client.xrange(stream, side.from, end, 'COUNT', want);
  side.count += page.length;
  if (page.length < want) side.done = true;
  else if (side.count >= cap) side.done = (await redis.client.xrange(stream, `(${page[page.length - 1][0]}`, end, 'COUNT', 1)).length === 0;
  else side.from = `(${page[page.length - 1][0]}`;
}
