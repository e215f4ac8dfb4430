import type { GroupStatus } from '../admin/admin.types';
import { LAG_COUNT_CAP } from '../consumer/coordination/lag';
import type { PartitionStandstill } from './stall-tracker';

/** Limits a group is held to; a limit left out is not checked. */
export interface GroupLimits {
  maxLag?: number;
  maxDeadLetters?: number;
  /** A partition with lag whose committed offset stood still longer than this is stalled. */
  maxStallMs?: number;
  /** A parked head failing longer than this (Redis clock) puts its group down. */
  maxParkedAgeMs?: number;
}

/** What this process knows about its own worker of a group. */
export interface LocalWorker {
  /** The process's consumers are started (and not stopped). */
  running: boolean;
  workerId: string;
  /** Partitions this process works right now. */
  ownedHere: number[];
}

/** The health of one consumer group, as reported under `groups.<name>`. */
export interface GroupHealth {
  status: 'up' | 'down';
  /** This process runs a worker of the group, and that worker is a live member. */
  running: boolean;
  /** Live members of the group across every process. */
  members: number;
  /** Partitions this process works. */
  ownedHere: number[];
  /** Partitions with no lease, or a lease held by a worker that is not a live member. */
  unowned: number[];
  /** Entries after the committed offsets, summed over partitions (see `PartitionStatus.lag` for when it is exact). */
  lag: number;
  /**
   * True when some partition's lag had to be counted (its position unknown, see `readLag`) and it holds more than
   * `LAG_COUNT_CAP` entries on both sides of its offset, so `lag` is a lower bound.
   */
  lagCapped: boolean;
  deadLetters: number;
  /** Messages parked behind failing heads (`ordering: 'key'` or `'unordered'`), summed over partitions: not done yet. */
  parked: number;
  /** Partitions whose committed offset has not moved for more than `maxStallMs` while they have lag (empty without `maxStallMs`). */
  stalled: number[];
  /** Why the group is down, one sentence each; empty when up. */
  problems: string[];
}

/**
 * Judges a group from its status in Redis and this process's view of it. Pure,
 * so every rule is in one place: a running local worker that is a live member,
 * a lease held by a live member on every partition, lag and dead letters
 * within the limits.
 */
export function evaluateGroup(
  status: GroupStatus | null,
  local: LocalWorker,
  limits: GroupLimits,
  standstills: readonly PartitionStandstill[] = [],
): GroupHealth {
  if (status === null) {
    return {
      status: 'down',
      running: false,
      members: 0,
      ownedHere: local.ownedHere,
      unowned: [],
      lag: 0,
      lagCapped: false,
      deadLetters: 0,
      parked: 0,
      stalled: [],
      problems: ['not registered in Redis: no worker of it has started'],
    };
  }
  const problems: string[] = [];
  const live = new Set(status.members.map((m) => m.workerId));
  const isMember = live.has(local.workerId);
  if (!local.running) problems.push('no running worker in this process (consumers not started, or stopped)');
  else if (!isMember) problems.push(`this process's worker ${local.workerId} is not a live member (its heartbeat expired)`);

  const noLease = status.partitions.filter((p) => p.leaseOwner === null).map((p) => p.partition);
  const deadOwner = status.partitions.filter((p) => p.leaseOwner !== null && !live.has(p.leaseOwner));
  if (noLease.length > 0) problems.push(`${plural('partition', noLease)} ${noLease.join(', ')}: no lease (nobody consumes it)`);
  if (deadOwner.length > 0) {
    const owners = deadOwner.map((p) => `${p.partition} (${p.leaseOwner})`).join(', ');
    problems.push(`${plural('partition', deadOwner)} ${owners}: lease held by a worker that is not a live member`);
  }

  const lagCapped = status.partitions.some((p) => p.lagCapped);
  if (limits.maxLag !== undefined) {
    if (status.lag > limits.maxLag) problems.push(`lag ${lagCapped ? 'over ' : ''}${status.lag} is over maxLag ${limits.maxLag}`);
    else if (lagCapped)
      problems.push(
        `lag is over ${status.lag} (counting stops at ${LAG_COUNT_CAP} per partition), so it cannot be shown within maxLag ${limits.maxLag}`,
      );
  }
  if (limits.maxDeadLetters !== undefined && status.deadLetters > limits.maxDeadLetters) {
    problems.push(`${status.deadLetters} dead letters, over maxDeadLetters ${limits.maxDeadLetters}`);
  }
  const { maxParkedAgeMs } = limits;
  if (maxParkedAgeMs !== undefined) {
    for (const { partition, oldestParked: head } of status.partitions) {
      if (head === null || head.failingForMs <= maxParkedAgeMs) continue;
      problems.push(
        `partition ${partition} key ${JSON.stringify(head.key)}: parked head ${head.offset} has been failing for ${head.failingForMs} ms ` +
          `(since ${head.firstFailedAt.toISOString()}), over maxParkedAgeMs ${maxParkedAgeMs}`,
      );
    }
  }
  const { maxStallMs } = limits;
  const stalled = maxStallMs === undefined ? [] : standstills.filter((s) => s.forMs > maxStallMs);
  for (const s of stalled) {
    problems.push(
      `partition ${s.partition} stalled: committed offset ${s.committed ?? '(none yet)'} has not moved for ${Math.round(s.forMs)} ms ` +
        `(maxStallMs ${maxStallMs}) while ${s.lag} ${s.lag === 1 ? 'entry waits' : 'entries wait'}`,
    );
  }

  return {
    status: problems.length === 0 ? 'up' : 'down',
    running: local.running && isMember,
    members: status.members.length,
    ownedHere: local.ownedHere,
    unowned: [...noLease, ...deadOwner.map((p) => p.partition)].sort((a, b) => a - b),
    lag: status.lag,
    lagCapped,
    deadLetters: status.deadLetters,
    parked: status.parked,
    stalled: stalled.map((s) => s.partition),
    problems,
  };
}

function plural(word: string, items: readonly unknown[]): string {
  return items.length === 1 ? word : `${word}s`;
}
