import type { EventrailRedis } from '../redis/eventrail-redis';

export interface GroupHold {
  group: string;
  /** False when every member has been gone longer than `staleGroupMs`: the group no longer holds the log back. */
  live: boolean;
  /** Committed offset per partition, null where the group has none yet (it then holds the whole partition). */
  committed: Array<string | null>;
}

/**
 * Reads, for every registered group, whether it is live and its committed
 * offsets: two round trips whatever the number of groups. The admin's
 * `GroupStatusReader` has the same facts but also counts lag entry by entry,
 * which a cycle does not need. Staleness is judged as
 * `EventrailAdmin.pruneStaleGroups` judges it (no live member, and the latest
 * heartbeat older than the threshold), on the Redis clock.
 */
export async function readGroupHolds(redis: EventrailRedis, staleGroupMs: number): Promise<{ now: number; groups: GroupHold[] }> {
  const { keys, client } = redis;
  const [members, [seconds, micros]] = await Promise.all([client.smembers(keys.groups), client.time()]);
  const names = members.sort();
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  if (names.length === 0) return { now, groups: [] };
  // Separate commands sent together: one round trip, and on a cluster the keys live in different slots.
  const commands: Array<Promise<unknown>> = [];
  for (const group of names) {
    commands.push(client.zcount(keys.members(group), `(${now}`, '+inf'), client.get(keys.seen(group)));
    for (let p = 0; p < keys.partitions; p++) commands.push(client.get(keys.offset(group, p)));
  }
  const replies = await Promise.all(commands);
  const value = (i: number): unknown => replies[i];
  const stride = 2 + keys.partitions;
  const groups = names.map((group, g): GroupHold => {
    const base = g * stride;
    const liveMembers = value(base) as number;
    const seen = Number(value(base + 1) ?? 0);
    const committed = Array.from({ length: keys.partitions }, (_, p) => value(base + 2 + p) as string | null);
    return { group, live: liveMembers > 0 || now - seen <= staleGroupMs, committed };
  });
  return { now, groups };
}
