import { parseMemberInfo, redisTimeToMs } from '../consumer/coordination/membership';
import { UnknownGroupError } from '../errors/unknown-group.error';
import type { EventrailRedis } from '../redis/eventrail-redis';
import type { MemberStatus } from './admin.types';
import { scoredReply } from '../redis/map-reply';

/** What Redis says about one group, read for the admin API, retention and health alike. */
export interface GroupFacts {
  name: string;
  /** Live members: their heartbeat expiry is still ahead on the Redis clock. */
  members: MemberStatus[];
  /** Unix ms (Redis clock) of the latest heartbeat of any member, or of the last member's leaving; null if never. */
  lastSeen: number | null;
  /** Committed offset per partition; null where the group has not read the partition yet. */
  committed: Array<string | null>;
  /** The oldest parked entry per partition (`'key'` and `'unordered'` ordering); null where nothing is parked. Retention keeps it. */
  parkedFloor: Array<string | null>;
}

/** Facts of some groups, and the Redis clock's time when they were read. */
export interface GroupFactsSnapshot {
  now: number;
  groups: GroupFacts[];
}

/** How long all members of a group must have been gone before it counts as stale (pruning, retention), by default. */
export const DEFAULT_STALE_GROUP_MS = 24 * 60 * 60 * 1000;

/**
 * The one rule for a stale group: no live member, and the latest heartbeat
 * older than `staleMs`, both on the Redis clock. A stale group no longer holds
 * the log back and may be pruned. A prune checks it once more inside Redis
 * (dropGroup-6.lua, the same rule in Lua), in the same atomic step as the
 * delete, so a worker that joined after these facts were read is never wiped.
 */
export function isStale(facts: GroupFacts, staleMs: number, now: number): boolean {
  return facts.members.length === 0 && now - (facts.lastSeen ?? 0) > staleMs;
}

/** Reads groups' membership, last-seen time and offsets: one round trip for any number of groups. */
export class GroupFactsReader {
  constructor(private readonly redis: EventrailRedis) {}

  /** Every group that ever registered, sorted. */
  async names(): Promise<string[]> {
    return (await this.redis.client.smembers(this.redis.keys.groups)).sort();
  }

  /** Throws `UnknownGroupError` unless `group` registered. */
  async assertExists(group: unknown): Promise<void> {
    if (typeof group !== 'string' || !(await this.redis.client.sismember(this.redis.keys.groups, group))) {
      throw new UnknownGroupError(String(group));
    }
  }

  /** Facts of every registered group. */
  async readAll(): Promise<GroupFactsSnapshot> {
    return this.read(await this.names());
  }

  /**
   * Facts of `groups`. Every command is sent before this returns (separate
   * commands, since on a cluster the keys live in different slots), so a
   * caller that sends its own commands in the same tick still pays one round
   * trip for all of them.
   */
  read(groups: readonly string[]): Promise<GroupFactsSnapshot> {
    const { keys, client } = this.redis;
    const time = client.time();
    const perGroup = groups.map((group) =>
      Promise.all([
        client.zrange(keys.members(group), '0', '-1', 'WITHSCORES'),
        client.hgetall(keys.memberInfo(group)),
        client.get(keys.seen(group)),
        Promise.all(Array.from({ length: keys.partitions }, (_, p) => client.get(keys.offset(group, p)))),
        Promise.all(Array.from({ length: keys.partitions }, (_, p) => client.hget(keys.recovery(group, p), 'parkedFloor'))),
      ]),
    );
    return Promise.all([time, Promise.all(perGroup)]).then(([clock, replies]) => {
      const now = redisTimeToMs(clock);
      const facts = replies.map(([scored, info, seen, committed, parkedFloor], g): GroupFacts => ({
        name: groups[g],
        members: liveMembers(scored, info, now),
        lastSeen: seen === null ? null : Number(seen),
        committed,
        parkedFloor,
      }));
      return { now, groups: facts };
    });
  }
}

/** Members whose heartbeat expiry is after `now` (expired ones wait for the next heartbeat to be swept). */
function liveMembers(scored: unknown, info: Record<string, string>, now: number): MemberStatus[] {
  const members: MemberStatus[] = [];
  for (const [workerId, expiresAt] of scoredReply(scored)) {
    if (expiresAt <= now) continue;
    const details = parseMemberInfo(info[workerId]);
    members.push({
      workerId,
      host: details.host ?? null,
      pid: details.pid ?? null,
      startedAt: details.startedAt ? new Date(details.startedAt) : null,
      lastHeartbeat: details.heartbeatTtlMs ? new Date(expiresAt - details.heartbeatTtlMs) : null,
      expiresAt: new Date(expiresAt),
    });
  }
  return members;
}
