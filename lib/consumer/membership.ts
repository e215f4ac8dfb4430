import type { Cluster, Redis } from 'ioredis';
import type { EventrailRedis } from '../redis/eventrail-redis';

/** Who a worker is, in every group it joins. */
export interface WorkerIdentity {
  /** `host:pid:random`. */
  id: string;
  host: string;
  pid: number;
  startedAt: number;
}

/** What a member records about itself for the admin API; with the TTL, its heartbeat expiry gives its last heartbeat. */
export interface MemberInfo {
  host?: string;
  pid?: number;
  startedAt?: number;
  heartbeatTtlMs?: number;
}

/**
 * Membership of one worker in one group. Members heartbeat into a sorted set
 * scored by expiry on the Redis clock (heartbeat-3.lua), so hosts need no
 * clock sync: a member counts while its score is in the future. The group's
 * last-seen time is written on the same clock, so staleness compares like
 * with like.
 */
export class GroupMembership {
  private readonly info: string;

  constructor(
    private readonly redis: EventrailRedis,
    private readonly group: string,
    private readonly worker: WorkerIdentity,
    private readonly ttlMs: number,
  ) {
    const { host, pid, startedAt } = worker;
    const info: MemberInfo = { host, pid, startedAt, heartbeatTtlMs: ttlMs };
    this.info = JSON.stringify(info);
  }

  /**
   * Heartbeats first (a group listed without a last-seen time could look
   * stale to retention and pruning), then registers the group and the events
   * it handles for the admin API. Returns the live members.
   */
  async join(events: Iterable<string>): Promise<string[]> {
    const { keys, client } = this.redis;
    const members = await this.heartbeat();
    await Promise.all([client.sadd(keys.groups, this.group), client.sadd(keys.events(this.group), ...events)]);
    return members;
  }

  /** Records that this worker is alive, forgets expired members, and returns the live ones, sorted. */
  heartbeat(): Promise<string[]> {
    const { keys, client } = this.redis;
    const { group } = this;
    return client.eventrailHeartbeat(keys.members(group), keys.memberInfo(group), keys.seen(group), this.worker.id, this.ttlMs, this.info);
  }

  /** Leaves the group at once (rather than when the heartbeat expires), recording when it was last seen. */
  async leave(): Promise<void> {
    const { keys, client } = this.redis;
    const now = await readRedisClock(client);
    await client
      .pipeline()
      .zrem(keys.members(this.group), this.worker.id)
      .hdel(keys.memberInfo(this.group), this.worker.id)
      .set(keys.seen(this.group), now)
      .exec();
  }
}

/** Unix ms on the Redis clock, from a `TIME` reply. */
export function redisTimeToMs([seconds, micros]: ReadonlyArray<string | number>): number {
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

/** Unix ms on the Redis clock: what heartbeats, expiries and last-seen times are written on. */
export async function readRedisClock(client: Redis | Cluster): Promise<number> {
  return redisTimeToMs(await client.time());
}

/** Member details as stored; unreadable details give an empty record (the member is reported without them). */
export function parseMemberInfo(json: string | undefined): MemberInfo {
  if (!json) return {};
  try {
    return JSON.parse(json) as MemberInfo;
  } catch {
    return {};
  }
}
