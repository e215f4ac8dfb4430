import { leaseOwner } from '../consumer/coordination/lease';
import { readLag } from '../consumer/coordination/lag';
import { PARKED_FIELD_PREFIX, parseLine } from '../consumer/handling/parked-lines';
import type { EventrailRedis } from '../redis/eventrail-redis';
import type { GroupStatus, ParkedHead, PartitionStatus } from './admin.types';
import type { GroupFactsReader } from './group-facts.reader';

/**
 * Reads a group's status (its facts, leases, dead letters, lag and parked
 * messages): one round trip, a constant number of commands per partition
 * whatever the lag (see `readLag`), plus a count only where a partition's lag
 * position is unknown. Parked lines cost nothing where there are none: the
 * facts carry each partition's `parkedFloor`, and only a partition that has
 * one is read whole (one HGETALL of its recovery hash, in a second round trip).
 */
export class GroupStatusReader {
  constructor(
    private readonly redis: EventrailRedis,
    private readonly facts: GroupFactsReader,
  ) {}

  /**
   * `signal` stops the read where it stands (rejecting with its reason): no
   * lag count starts after it fired, and a count under way stops at its next
   * page, so a caller that gave up leaves little work behind it.
   */
  async read(group: string, { signal }: { signal?: AbortSignal } = {}): Promise<GroupStatus> {
    signal?.throwIfAborted();
    const { keys, client } = this.redis;
    // Sent in the same tick as the facts' commands: one round trip for all.
    const factsRead = this.facts.read([group]);
    const leases = Array.from({ length: keys.partitions }, (_, p) =>
      Promise.all([client.get(keys.lease(group, p)), client.pttl(keys.lease(group, p)), readLag(client, keys, group, p, signal)]),
    );
    const [
      {
        now,
        groups: [facts],
      },
      events,
      deadLetters,
      partitions,
    ] = await Promise.all([factsRead, client.smembers(keys.events(group)), client.xlen(keys.deadLetters(group)), Promise.all(leases)]);

    signal?.throwIfAborted();
    const parked = await Promise.all(
      facts.parkedFloor.map((floor, p) =>
        floor === null
          ? Promise.resolve(NOTHING_PARKED)
          : client.hgetall(keys.recovery(group, p)).then((fields) => parkedLinesIn(fields, now)),
      ),
    );
    signal?.throwIfAborted();
    const partitionStatus: PartitionStatus[] = partitions.map(([lease, ttl, { lag, capped }], p) => {
      return {
        partition: p,
        committed: facts.committed[p],
        lag,
        lagCapped: capped,
        leaseOwner: lease ? leaseOwner(lease) : null,
        leaseExpiresInMs: lease && ttl >= 0 ? ttl : null,
        parked: parked[p].messages,
        oldestParked: parked[p].oldest,
      };
    });
    return {
      name: group,
      events: events.sort(),
      members: facts.members,
      partitions: partitionStatus,
      lag: partitionStatus.reduce((sum, p) => sum + p.lag, 0),
      parked: partitionStatus.reduce((sum, p) => sum + p.parked, 0),
      deadLetters,
      lastSeen: facts.lastSeen === null ? null : new Date(facts.lastSeen),
    };
  }
}

const NOTHING_PARKED = { messages: 0, oldest: null };

/**
 * The parked messages of a partition's recovery hash (`fields`, as HGETALL gives them) and the head that has
 * been failing longest, its age taken against `now` (Redis's clock, as the lines' times are).
 */
export function parkedLinesIn(fields: Record<string, string>, now: number): { messages: number; oldest: ParkedHead | null } {
  let messages = 0;
  let oldest: ParkedHead | null = null;
  for (const [field, value] of Object.entries(fields)) {
    if (!field.startsWith(PARKED_FIELD_PREFIX)) continue;
    const line = parseLine(value);
    if (!line) continue;
    messages += line.ids.length;
    if (line.f > 0 && (oldest === null || line.f < oldest.firstFailedAt.getTime())) {
      oldest = { key: line.k, offset: line.ids[0], firstFailedAt: new Date(line.f), failingForMs: Math.max(0, now - line.f) };
    }
  }
  return { messages, oldest };
}
