import type { Cluster, Redis } from 'ioredis';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import { groupWants, NO_WANTS, type GroupWants } from './group-wants';
import { parseMemberInfo, type MemberInfo } from './member-info';

export { parseMemberInfo, type MemberInfo } from './member-info';

/** Who a worker is, in every group it joins. */
export interface WorkerIdentity {
  /** `host:pid:random`. */
  id: string;
  host: string;
  pid: number;
  startedAt: number;
}

/**
 * Membership of one worker in one group. Members heartbeat into a sorted set
 * scored by expiry on the Redis clock (heartbeat-4.lua), so hosts need no
 * clock sync: a member counts while its score is in the future. The group's
 * last-seen time is written on the same clock, so staleness compares like
 * with like.
 *
 * Every heartbeat also puts the group back in the registry (`keys.groups`),
 * so a running group is listed for admin, retention and health even after
 * the registry lost it (a delete or prune that raced a join, a hand-made
 * SREM). The registry lives in another cluster slot than the group's keys,
 * so that is a separate command, sent with the heartbeat in the same round
 * trip. The heartbeat returns the group's generation, which a delete bumps:
 * when it changed, the group was deleted while this worker counted as gone,
 * and the events it handles are registered again.
 */
export class GroupMembership {
  private info: string;
  private events: string[] = [];
  /** What the live members want, as of the last heartbeat. */
  wants: GroupWants = NO_WANTS;
  /** The group's generation as the last heartbeat saw it; stamped on the partitions this worker acquires. */
  generation?: string;

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
   * it handles for the admin API. Returns the live members that may work
   * partitions: those that handle every type the group's live members want.
   */
  async join(events: Iterable<string>): Promise<string[]> {
    const { keys, client } = this.redis;
    this.events = [...events].sort();
    this.info = JSON.stringify({ ...parseMemberInfo(this.info), events: this.events });
    // Sent right after the heartbeat on the same connection: the details of exactly the live members.
    const [members, details] = await Promise.all([this.beat(), client.hgetall(keys.memberInfo(this.group))]);
    await Promise.all([client.sadd(keys.groups, this.group), this.registerEvents()]);
    return this.weigh(members, details);
  }

  /**
   * Records that this worker is alive and that the group exists, forgets
   * expired members, and returns the live ones that may work partitions
   * (see `join`), sorted.
   */
  async heartbeat(): Promise<string[]> {
    const { keys, client } = this.redis;
    const [members, , details] = await Promise.all([
      this.beat(),
      client.sadd(keys.groups, this.group),
      client.hgetall(keys.memberInfo(this.group)),
    ]);
    return this.weigh(members, details);
  }

  private weigh(members: string[], details: Record<string, string>): string[] {
    this.wants = groupWants(members, details, this.worker.id, new Set(this.events));
    return this.wants.able;
  }

  private async beat(): Promise<string[]> {
    const { group } = this;
    const { generation, members } = await this.redis.scripts.heartbeat({
      group,
      workerId: this.worker.id,
      ttlMs: this.ttlMs,
      infoJson: this.info,
    });
    const deleted = this.generation !== undefined && generation !== this.generation;
    this.generation = generation;
    // Only after a delete, which took the events set with it: no extra command otherwise.
    if (deleted) await this.registerEvents();
    return members;
  }

  private async registerEvents(): Promise<void> {
    if (this.events.length > 0) await this.redis.client.sadd(this.redis.keys.events(this.group), ...this.events);
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
