import type { Cluster, Redis } from 'ioredis';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import { RedisFullError } from '../../errors/redis-full.error';
import { groupWants, NO_WANTS, type GroupWants } from './group-wants';
import { parseMemberInfo, type MemberInfo } from './member-info';
import { scoredReply } from '../../redis/map-reply';

export { parseMemberInfo, type MemberInfo } from './member-info';

/** Who a worker is, in every group it joins. */
export interface WorkerIdentity {
  /** `host:pid:random`. */
  id: string;
  host: string;
  pid: number;
  startedAt: number;
}

/** How many of its heartbeat TTLs a member gone without leaving keeps its types wanted. */
export const HELD_TTL_FACTOR = 3;

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
  /** The other live members as the last heartbeat saw them: their types and heartbeat expiry (Redis clock). */
  private seen = new Map<string, { events: string[]; expiresAt: number; ttlMs: number }>();
  /** Types of members gone without leaving, wanted until the given ms (Redis clock). */
  private held = new Map<string, number>();
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
  join(events: Iterable<string>): Promise<string[]> {
    // A full Redis refuses the heartbeat's writes: say so, typed, rather than with its raw OOM reply.
    return this.register(events).catch((error: unknown) => {
      throw RedisFullError.from(`join group "${this.group}" (its heartbeat and event types)`, error);
    });
  }

  private async register(events: Iterable<string>): Promise<string[]> {
    const { keys, client } = this.redis;
    this.events = [...events].sort();
    this.info = JSON.stringify({ ...parseMemberInfo(this.info), events: this.events });
    // Sent right before the heartbeat on the same connection, which forgets expired members: their details
    // and expiries are still there to hold their types (see `weigh`).
    const [details, scores, members, now] = await Promise.all([
      client.hgetall(keys.memberInfo(this.group)),
      client.zrange(keys.members(this.group), '0', '-1', 'WITHSCORES'),
      this.beat(),
      this.readClock(),
    ]);
    await Promise.all([client.sadd(keys.groups, this.group), this.registerEvents()]);
    return this.weigh(members, details, scores, now);
  }

  /**
   * Records that this worker is alive and that the group exists, forgets
   * expired members, and returns the live ones that may work partitions
   * (see `join`), sorted.
   */
  async heartbeat(): Promise<string[]> {
    const { keys, client } = this.redis;
    // Read before the heartbeat forgets expired members (see `register`).
    const [details, scores, members, , now] = await Promise.all([
      client.hgetall(keys.memberInfo(this.group)),
      client.zrange(keys.members(this.group), '0', '-1', 'WITHSCORES'),
      this.beat(),
      client.sadd(keys.groups, this.group),
      this.readClock(),
    ]);
    return this.weigh(members, details, scores, now);
  }

  /**
   * A member that vanished after its heartbeat expired crashed or froze (one
   * that leaves removes itself before its expiry): its types stay wanted for
   * `HELD_TTL_FACTOR` × its heartbeat TTL, so the others wait for it rather
   * than commit past its events while it restarts. Held types are shared
   * through every live member's details, so a member that joins later keeps
   * them too. A member that left (a deliberate removal or a rollback) takes
   * its types with it at once.
   */
  private weigh(members: string[], details: Record<string, string>, scores: unknown, now: number): string[] {
    const live = new Set(members);
    for (const [id, last] of this.seen) {
      if (live.has(id) || now < last.expiresAt) continue;
      for (const event of last.events) this.holdUntil(event, now + HELD_TTL_FACTOR * last.ttlMs);
    }
    const expiries = scoredReply(scores);
    // Members whose heartbeat expired since anyone last forgot them (this heartbeat forgets them now), also ones
    // this worker never saw alive: after a Redis outage longer than heartbeatTtlMs every member expired at once, and
    // a member of an older version that joined first would otherwise find nobody wanting the newer types.
    for (const [id, expiresAt] of expiries) {
      if (live.has(id) || id === this.worker.id || expiresAt > now) continue;
      const info = parseMemberInfo(details[id]);
      if (!Array.isArray(info.events)) continue;
      const until = expiresAt + HELD_TTL_FACTOR * (info.heartbeatTtlMs ?? this.ttlMs);
      for (const event of info.events) this.holdUntil(event, until);
    }
    this.seen = new Map();
    for (const id of members) {
      const info = parseMemberInfo(details[id]);
      for (const [event, until] of Object.entries(info.held ?? {})) if (typeof until === 'number') this.holdUntil(event, until);
      if (id === this.worker.id || !Array.isArray(info.events)) continue;
      const expiresAt = expiries.get(id);
      if (expiresAt !== undefined) this.seen.set(id, { events: info.events, expiresAt, ttlMs: info.heartbeatTtlMs ?? this.ttlMs });
    }
    for (const [event, until] of this.held) if (until <= now) this.held.delete(event);
    // Sent with the next heartbeat.
    this.info = JSON.stringify({ ...parseMemberInfo(this.info), held: Object.fromEntries(this.held) });
    this.wants = groupWants(members, details, this.worker.id, new Set(this.events), this.held.keys());
    return this.wants.able;
  }

  /** Reads the Redis clock and teaches it to this process's `RedisClock` (see there). */
  private async readClock(): Promise<number> {
    const sentAt = performance.now();
    const now = await readRedisClock(this.redis.client);
    this.redis.clock.observe(now, sentAt, performance.now());
    return now;
  }

  private holdUntil(event: string, until: number): void {
    if (until > (this.held.get(event) ?? 0)) this.held.set(event, until);
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
