import { leaseOwner } from '../consumer/lease';
import { countEntriesAfter, LAG_COUNT_CAP } from '../log/lag';
import type { EventrailRedis } from '../redis/eventrail-redis';
import type { GroupStatus, PartitionStatus } from './admin.types';
import type { GroupFactsReader } from './group-facts.reader';

/** Reads a group's status (its facts, leases, dead letters and lag): one round trip, plus a count only where there is lag. */
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
      Promise.all([
        client.get(keys.lease(group, p)),
        client.pttl(keys.lease(group, p)),
        client.xrevrange(keys.stream(p), '+', '-', 'COUNT', 1),
      ]),
    );
    const [
      {
        groups: [facts],
      },
      events,
      deadLetters,
      partitions,
    ] = await Promise.all([factsRead, client.smembers(keys.events(group)), client.xlen(keys.deadLetters(group)), Promise.all(leases)]);

    // Lag is counted only where there is some, every partition at once.
    signal?.throwIfAborted();
    const partitionStatus: PartitionStatus[] = await Promise.all(
      partitions.map(async ([lease, ttl, last], p) => {
        const committed = facts.committed[p];
        const lastId = last[0]?.[0] ?? null;
        const { lag, capped } =
          lastId === null || lastId === committed
            ? { lag: 0, capped: false }
            : await countEntriesAfter(client, keys.stream(p), committed ?? '0-0', LAG_COUNT_CAP, signal);
        return {
          partition: p,
          committed,
          lag,
          lagCapped: capped,
          leaseOwner: lease ? leaseOwner(lease) : null,
          leaseExpiresInMs: lease && ttl >= 0 ? ttl : null,
        };
      }),
    );
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
