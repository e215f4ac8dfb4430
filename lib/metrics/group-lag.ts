import type { GroupStatus, PartitionStatus } from '../admin/admin.types';

/**
 * How far behind one consumer group is, read from Redis alone: it exists
 * whether or not any worker of the group runs, which is what a scaler needs
 * to bring a group up from zero.
 */
export interface GroupLag {
  group: string;
  /** Entries after the group's committed offsets, summed over partitions. */
  lag: number;
  /** True when a partition's lag had to be counted and passed the count's cap: `lag` is then a lower bound. */
  lagCapped: boolean;
  /**
   * Messages parked by a failing head (`ordering: 'key'` or `'unordered'`): behind the committed offsets,
   * so not in `lag`, but still to be handled: work, like lag.
   */
  parked: number;
  /** How long the parked head failing longest has been failing (Redis clock, ms); 0 when none is. */
  parkedOldestAgeMs: number;
  /** `lag + parked`: everything the group still has to handle, the value to scale on. */
  backlog: number;
  /** Live members (workers) of the group now. */
  members: number;
  /** Partitions of the log: no group can use more workers than this. */
  partitions: number;
  /**
   * Partitions with work (lag or parked messages): the most workers that can
   * be busy now, since a partition is worked by one worker at a time.
   */
  usefulWorkers: number;
  /** Dead letters waiting in the group. */
  deadLetters: number;
}

/** Messages parked in a partition: the committed offset moved past them, but they are still work a scaler must see. */
export function parkedIn(partition: PartitionStatus): number {
  return partition.parked;
}

/**
 * Whether a status read found the group registered: its event types (written
 * when its first worker starts) or a live member. A group deleted while it
 * was read, or a name left in the registry with nothing behind it, has
 * neither; its partitions then read as never consumed, and every entry of the
 * log would show as phantom lag. The event types are read after the offsets
 * on the same connection, and a delete removes them first, so a status that
 * still has them read its offsets before the delete began.
 */
export function isRegistered(status: GroupStatus): boolean {
  return status.events.length > 0 || status.members.length > 0;
}

/** A group's status, reduced to what scaling needs. */
export function groupLag(status: GroupStatus): GroupLag {
  let lag = 0;
  let parked = 0;
  let usefulWorkers = 0;
  let lagCapped = false;
  let parkedOldestAgeMs = 0;
  for (const partition of status.partitions) {
    const held = parkedIn(partition);
    lag += partition.lag;
    parked += held;
    lagCapped ||= partition.lagCapped;
    parkedOldestAgeMs = Math.max(parkedOldestAgeMs, partition.oldestParked?.failingForMs ?? 0);
    if (partition.lag + held > 0) usefulWorkers++;
  }
  return {
    group: status.name,
    lag,
    lagCapped,
    parked,
    parkedOldestAgeMs,
    backlog: lag + parked,
    members: status.members.length,
    partitions: status.partitions.length,
    usefulWorkers,
    deadLetters: status.deadLetters,
  };
}
