import { leaseOwner } from '../consumer/coordination/lease';
import { readLag } from '../consumer/coordination/lag';
import type { EventrailRedis } from '../redis/eventrail-redis';
import type { GroupStatus, PartitionStatus } from './admin.types';
import type { GroupFactsReader } from './group-facts.reader';

/**
 * Reads a group's status (its facts, leases, dead letters and lag): one round
 * trip, a constant number of commands per partition whatever the lag (see
 * `readLag`), plus a count only where a partition's lag position is unknown.
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
        groups: [facts],
      },
      events,
      deadLetters,
      partitions,
    ] = await Promise.all([factsRead, client.smembers(keys.events(group)), client.xlen(keys.deadLetters(group)), Promise.all(leases)]);

    signal?.throwIfAborted();
    const partitionStatus: PartitionStatus[] = partitions.map(([lease, ttl, { lag, capped }], p) => {
      return {
        partition: p,
        committed: facts.committed[p],
        lag,
        lagCapped: capped,
        leaseOwner: lease ? leaseOwner(lease) : null,
        leaseExpiresInMs: lease && ttl >= 0 ? ttl : null,
      };
    });
    return {
      name: group,
      events: events.sort(),
      members: facts.members,
      partitions: partitionStatus,
      lag: partitionStatus.reduce((sum, p) => sum + p.lag, 0),
      deadLetters,
      lastSeen: facts.lastSeen === null ? null : new Date(facts.lastSeen),
    };
  }
}
