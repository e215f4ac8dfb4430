import type { Cluster, Redis } from 'ioredis';
import { EventrailScripts } from '../../redis/eventrail-scripts';
import type { EventrailKeys } from '../../redis/keys';
import { STREAM_START } from '../../wire/stream-id';
import { mapReply } from '../../redis/map-reply';

/** A group's lag in one partition, and the committed offset it was measured from (null: never read). */
export interface PartitionLag {
  lag: number;
  /** True when the lag was counted and both sides of the offset passed `LAG_COUNT_CAP`: a lower bound. */
  capped: boolean;
  committed: string | null;
}

/**
 * A group's lag in a partition. One script call (readLag-3.lua): the
 * committed offset keeps its position in the stream's `entries-added`
 * numbering (written by the commit script), so lag is `entries-added` minus
 * that, exact at any depth. Where the position is not known (a group last
 * committed by an older eventrail, an entry after the offset deleted, Redis
 * 6.2) the entries are counted instead, as `countEntriesAfter` does.
 */
export async function readLag(
  client: Redis | Cluster,
  keys: EventrailKeys,
  group: string,
  partition: number,
  signal?: AbortSignal,
): Promise<PartitionLag> {
  signal?.throwIfAborted();
  const stream = keys.stream(partition);
  const { lag, committed } = await new EventrailScripts(client, keys).readLag({ group, partition });
  if (lag >= 0) return { lag, capped: false, committed };
  return { ...(await countEntriesAfter(client, stream, committed ?? STREAM_START, LAG_COUNT_CAP, signal)), committed };
}

/** Entries a reset counts to give its new offset a lag position (resetOffset-6.lua); past this, the position stays unknown. */
export const RESET_COUNT_CAP = 100_000;

/**
 * Counts the entries after `after` up to the stream's last generated id as
 * XINFO STREAM gave it with `entries-added`: what resetOffset-6.lua needs to
 * place `after` in the numbering. Undefined on Redis before 7.0, or past
 * `cap` entries.
 */
export async function countToEnd(
  client: Redis | Cluster,
  stream: string,
  after: string,
  cap = RESET_COUNT_CAP,
): Promise<{ upTo: string; count: number; entriesAdded: number } | undefined> {
  const reply = await client.xinfo('STREAM', stream).catch(() => null);
  if (!reply) return undefined;
  const info = mapReply(reply);
  const upTo = info.get('last-generated-id');
  const entriesAdded = info.get('entries-added');
  if (typeof upTo !== 'string' || typeof entriesAdded !== 'number') return undefined;
  let count = 0;
  let from = `(${after}`;
  while (count <= cap) {
    const page = await client.xrange(stream, from, upTo, 'COUNT', PAGE);
    count += page.length;
    if (page.length < PAGE) return count <= cap ? { upTo, count, entriesAdded } : undefined;
    from = `(${page[page.length - 1][0]}`;
  }
  return undefined;
}

/**
 * Where lag has to be counted entry by entry (streams have no range count),
 * each side of the committed offset is counted up to this many entries; past
 * it on both sides the lag is reported as capped.
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
 *
 * `signal` stops the count between pages (it rejects with the signal's
 * reason): a caller that gave up, such as a health check past its timeout,
 * leaves at most the pages already sent behind it, not the whole count.
 */
export async function countEntriesAfter(
  client: Redis | Cluster,
  stream: string,
  after: string,
  cap = LAG_COUNT_CAP,
  signal?: AbortSignal,
): Promise<{ lag: number; capped: boolean }> {
  signal?.throwIfAborted();
  // Nothing committed yet: every entry is after the offset.
  if (after === STREAM_START) return { lag: await client.xlen(stream), capped: false };
  const forward: Side = { count: 0, from: `(${after}`, done: false };
  await readPage(client, stream, forward, '+', cap, signal);
  if (forward.done) return { lag: forward.count, capped: false };

  for (let attempt = 0; attempt < 2; attempt++) {
    const backward: Side = { count: 0, from: '-', done: false };
    // The length and the first entry together: a trim during the count changes the first entry.
    const snapshot = lengthAndFirst(client, stream);
    snapshot.catch(() => undefined); // awaited below, or not needed when the forward count ends first
    while (forward.count < cap || backward.count < cap) {
      await Promise.all([readPage(client, stream, forward, '+', cap, signal), readPage(client, stream, backward, after, cap, signal)]);
      if (forward.done) return { lag: forward.count, capped: false };
      if (backward.done) break;
    }
    const { length, first } = await snapshot;
    if (!backward.done) return { lag: forward.count, capped: true };
    signal?.throwIfAborted();
    // Counted against the same history as the length: exact. Else retention trimmed meanwhile; count again.
    if ((await lengthAndFirst(client, stream)).first === first) return { lag: Math.max(0, length - backward.count), capped: false };
  }
  return { lag: forward.count, capped: true };
}

async function lengthAndFirst(client: Redis | Cluster, stream: string): Promise<{ length: number; first: string | null }> {
  const replies = await client.multi().xlen(stream).xrange(stream, '-', '+', 'COUNT', 1).exec();
  const [lengthReply, firstReply] = replies ?? [];
  if (!lengthReply || lengthReply[0] || !firstReply || firstReply[0])
    throw lengthReply?.[0] ?? firstReply?.[0] ?? new Error('MULTI aborted');
  const entries = firstReply[1] as Array<[string, string[]]>;
  return { length: lengthReply[1] as number, first: entries[0]?.[0] ?? null };
}

/** Counts one more page of a side, up to `cap`; `done` once the range has no more entries. */
async function readPage(
  client: Redis | Cluster,
  stream: string,
  side: Side,
  end: string,
  cap: number,
  signal?: AbortSignal,
): Promise<void> {
  if (side.done || side.count >= cap) return;
  signal?.throwIfAborted();
  const want = Math.min(PAGE, cap - side.count);
  const page = await client.xrange(stream, side.from, end, 'COUNT', want);
  side.count += page.length;
  if (page.length < want) side.done = true;
  else if (side.count >= cap) side.done = (await client.xrange(stream, `(${page[page.length - 1][0]}`, end, 'COUNT', 1)).length === 0;
  else side.from = `(${page[page.length - 1][0]}`;
}
