/** A live worker of a group. */
export interface MemberStatus {
  workerId: string;
  host: string | null;
  pid: number | null;
  startedAt: Date | null;
  lastHeartbeat: Date | null;
  /** When the member stops counting unless it heartbeats again. */
  expiresAt: Date;
}

export interface PartitionStatus {
  partition: number;
  /** Committed offset, or null before the group first read the partition. */
  committed: string | null;
  /** Entries after the committed offset, counted up to `LAG_COUNT_CAP`. */
  lag: number;
  /** True when there are more than `lag` entries (the count stopped at the cap). */
  lagCapped: boolean;
  /** Worker id holding the lease, or null when nobody does. */
  leaseOwner: string | null;
  leaseExpiresInMs: number | null;
}

export interface GroupStatus {
  name: string;
  /** Event types the group has handlers for. */
  events: string[];
  members: MemberStatus[];
  partitions: PartitionStatus[];
  /** Sum of the partitions' lag. */
  lag: number;
  deadLetters: number;
  /** Latest heartbeat of any member, or null if none was ever recorded. */
  lastSeen: Date | null;
}

export type OffsetTarget = 'start' | 'end' | { id: string } | { time: Date };

export interface OffsetChange {
  partition: number;
  from: string | null;
  to: string;
}

export interface OffsetResetResult {
  group: string;
  dryRun: boolean;
  partitions: OffsetChange[];
}

export interface PartitionLogStats {
  partition: number;
  length: number;
  firstId: string | null;
  lastId: string | null;
}

export interface LogStats {
  prefix: string;
  partitions: PartitionLogStats[];
  /** Redis `used_memory` in bytes, when INFO is allowed. */
  usedMemoryBytes: number | null;
}

/** A Redis primary and the partitions whose keys it holds (one entry on a single Redis). */
export interface NodeStatus {
  /** `host:port` of the primary. */
  node: string;
  /** `host:port` of its replicas, as the cluster reports them. */
  replicas: string[];
  /** Hash slot ranges it serves (`[[0, 16383]]` on a single Redis). */
  slots: Array<[number, number]>;
  /** Partitions whose keys live on it. */
  partitions: number[];
}
