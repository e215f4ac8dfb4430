/** What a health check saw of one partition of a group. */
export interface PartitionProgress {
  partition: number;
  /** Committed offset, or null before the group first read the partition. */
  committed: string | null;
  lag: number;
}

/** A partition with lag, and how long its committed offset has stood where it is. */
export interface PartitionStandstill {
  partition: number;
  committed: string | null;
  lag: number;
  /** Milliseconds since a check first saw the partition with lag at this offset. */
  forMs: number;
}

/**
 * Burrow's rule needs history: a partition is stuck when its committed offset
 * has not moved for a while although entries wait after it. Health checks are
 * called over and over (a probe every few seconds), so the indicator remembers,
 * per (group, partition), the offset it last saw and since when, on a
 * monotonic clock (a wall-clock jump must not fake or hide a stall). A
 * partition without lag is forgotten: waiting for events is not being stuck.
 * Memory is bounded by the groups and partitions of this process.
 */
export class StallTracker {
  private readonly seen = new Map<string, Map<number, { committed: string | null; since: number }>>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Records what a check saw of `group` and returns its partitions with lag, with how long each has stood still. */
  observe(group: string, partitions: readonly PartitionProgress[]): PartitionStandstill[] {
    const now = this.now();
    const previous = this.seen.get(group) ?? new Map<number, { committed: string | null; since: number }>();
    const next = new Map<number, { committed: string | null; since: number }>();
    const standstills: PartitionStandstill[] = [];
    for (const { partition, committed, lag } of partitions) {
      if (lag === 0) continue;
      const before = previous.get(partition);
      const since = before !== undefined && before.committed === committed ? before.since : now;
      next.set(partition, { committed, since });
      standstills.push({ partition, committed, lag, forMs: now - since });
    }
    this.seen.set(group, next);
    return standstills;
  }

  /** Forgets every group but `groups` (one that stopped being consumed here). */
  retain(groups: readonly string[]): void {
    for (const group of this.seen.keys()) if (!groups.includes(group)) this.seen.delete(group);
  }
}
