import type { EventrailRedis } from '../redis/eventrail-redis';

/** Lag is counted entry by entry (streams have no range count); past this many per partition it is reported as capped. */
export const LAG_COUNT_CAP = 10_000;
const PAGE = 1_000;

/** Entries after `after` in a partition, counted in pages up to `cap`. */
export async function countEntriesAfter(
  redis: EventrailRedis,
  partition: number,
  after: string,
  cap = LAG_COUNT_CAP,
): Promise<{ lag: number; capped: boolean }> {
  const stream = redis.keys.stream(partition);
  let count = 0;
  let cursor = after;
  while (count < cap) {
    const want = Math.min(PAGE, cap - count);
    const page = await redis.client.xrange(stream, `(${cursor}`, '+', 'COUNT', want);
    count += page.length;
    if (page.length < want) return { lag: count, capped: false };
    cursor = page[page.length - 1][0];
  }
  const more = await redis.client.xrange(stream, `(${cursor}`, '+', 'COUNT', 1);
  return { lag: count, capped: more.length > 0 };
}
