import { countEntriesAfter } from '../log/lag';
import type { EventrailRedis } from '../redis/eventrail-redis';
import type { GroupStatus, MemberStatus, PartitionStatus } from './admin.types';

/** Reads a group's membership, offsets, leases and lag: one round trip, plus a count only where there is lag. */
export class GroupStatusReader {
  constructor(private readonly redis: EventrailRedis) {}

  async read(group: string): Promise<GroupStatus> {
    const { keys, client } = this.redis;
    const partitions = keys.partitions;
    // Separate commands sent together: one round trip, and on a cluster they may live in different slots.
    const commands: Array<Promise<unknown>> = [
      client.smembers(keys.events(group)),
      client.zrange(keys.members(group), '0', '-1', 'WITHSCORES'),
      client.hgetall(keys.memberInfo(group)),
      client.get(keys.seen(group)),
      client.xlen(keys.deadLetters(group)),
      client.time(),
    ];
    for (let p = 0; p < partitions; p++) {
      commands.push(
        client.get(keys.offset(group, p)),
        client.get(keys.lease(group, p)),
        client.pttl(keys.lease(group, p)),
        client.xrevrange(keys.stream(p), '+', '-', 'COUNT', 1),
      );
    }
    const replies = await Promise.all(commands);
    const value = (i: number): unknown => replies[i];
    const [seconds, micros] = value(5) as [string, string];
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    const members = this.members(value(1) as string[], value(2) as Record<string, string>, now);

    // Lag is counted only where there is some, every partition at once.
    const partitionStatus: PartitionStatus[] = await Promise.all(
      Array.from({ length: partitions }, async (_, p) => {
        const base = 6 + p * 4;
        const committed = value(base) as string | null;
        const lease = value(base + 1) as string | null;
        const ttl = value(base + 2) as number;
        const last = value(base + 3) as Array<[string, string[]]>;
        const lastId = last[0]?.[0] ?? null;
        const { lag, capped } =
          lastId === null || lastId === committed ? { lag: 0, capped: false } : await countEntriesAfter(this.redis, p, committed ?? '0-0');
        return {
          partition: p,
          committed,
          lag,
          lagCapped: capped,
          leaseOwner: lease ? lease.slice(0, lease.lastIndexOf(':')) : null,
          leaseExpiresInMs: lease && ttl >= 0 ? ttl : null,
        };
      }),
    );
    const seen = value(3) as string | null;
    return {
      name: group,
      events: (value(0) as string[]).sort(),
      members,
      partitions: partitionStatus,
      lag: partitionStatus.reduce((sum, p) => sum + p.lag, 0),
      deadLetters: value(4) as number,
      lastSeen: seen ? new Date(Number(seen)) : null,
    };
  }

  private members(scored: string[], info: Record<string, string>, now: number): MemberStatus[] {
    const members: MemberStatus[] = [];
    for (let i = 0; i + 1 < scored.length; i += 2) {
      const expiresAt = Number(scored[i + 1]);
      if (expiresAt <= now) continue; // expired, not yet swept by a heartbeat
      const workerId = scored[i];
      const details = parseInfo(info[workerId]);
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
}

interface MemberInfo {
  host?: string;
  pid?: number;
  startedAt?: number;
  heartbeatTtlMs?: number;
}

function parseInfo(json: string | undefined): MemberInfo {
  if (!json) return {};
  try {
    return JSON.parse(json) as MemberInfo;
  } catch {
    return {}; // unreadable details: the member is reported without them
  }
}
