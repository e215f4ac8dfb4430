import type { ResolvedLogOptions } from '../config/log.options';
import type { ResolvedTracingOptions } from '../tracing/tracing.options';
import type { ArchiveObject, ArchiveSource, ProgressListener, RetentionRunResult } from './operations.types';

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
  /**
   * Entries after the committed offset: exact, from the offset's stored position (see `readLag`); where that is unknown and
   * the entries are counted, exact unless both sides of the offset hold more than `LAG_COUNT_CAP` entries.
   */
  lag: number;
  /** True when there are more than `lag` entries (the count stopped at the cap). */
  lagCapped: boolean;
  /** Worker id holding the lease, or null when nobody does. */
  leaseOwner: string | null;
  leaseExpiresInMs: number | null;
  /**
   * Messages parked in the partition (`'key'` and `'unordered'` ordering): behind the committed offset but
   * not done, so work like `lag`. 0 when nothing is parked.
   */
  parked: number;
  /** The parked head of the partition that has been failing longest; null when no parked head has failed yet. */
  oldestParked: ParkedHead | null;
}

/** A failing parked head, as a status read saw it. */
export interface ParkedHead {
  key: string;
  offset: string;
  /** When it first failed (Redis clock). */
  firstFailedAt: Date;
  /** How long it has been failing when the status was read, on Redis's clock. */
  failingForMs: number;
}

export interface GroupStatus {
  name: string;
  /** Event types the group has handlers for. */
  events: string[];
  members: MemberStatus[];
  partitions: PartitionStatus[];
  /** Sum of the partitions' lag. */
  lag: number;
  /** Sum of the partitions' parked messages: not in `lag` (they are behind the offsets), not done either. */
  parked: number;
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
  /** Entries ever appended, trimmed ones included (Redis 7.0 and later; null before): its rate is the publish rate. */
  entriesAdded: number | null;
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

/** What `EventrailAdmin.overview()` gives: the dashboard's overview and the CLI's `status` in one read. */
export interface DashboardOverview {
  /** When it was read (this process's clock). */
  time: Date;
  prefix: string;
  partitions: number;
  redis: { status: string; pingMs: number; usedMemoryBytes: number | null };
  nodes: NodeStatus[];
  log: { partitions: PartitionLogStats[]; length: number; entriesAdded: number | null };
  groups: GroupStatus[];
}

/** One entry of the log as `EventrailAdmin.readLog` and `follow` return it. */
export interface LogEntry {
  partition: number;
  /** Stream id of the entry in its partition. */
  offset: string;
  /** Event id (the stream id when the producer wrote none); null for a malformed entry. */
  id: string | null;
  event: string | null;
  key: string | null;
  /** Parsed payload, or the raw string when it is not valid JSON. */
  data: unknown;
  headers: Record<string, string>;
  publishedAt: Date | null;
  /** Set on dead-letter replays and restores: the one group that handles the entry. */
  to: string | null;
  /** Why consumers dead-letter this entry without handling it, or null when it is well-formed. */
  malformed: string | null;
  /** Every field as stored, for malformed entries (null otherwise). */
  fields: string[] | null;
}

export interface LogPage {
  partition: number;
  entries: LogEntry[];
  /** Pass as `after` for the next page; null when the scan reached the end of the partition. */
  next: string | null;
  /**
   * The last entry this call looked at, matching or not (else the `after` it was given, or null): pass it
   * as `after` to wait for new entries without scanning again what a filter skipped.
   */
  scannedTo: string | null;
}

export interface ReadLogOptions {
  /** First entry to return: a stream id (inclusive) or a time (entries appended at or after it, by Redis's clock). Default: the start. */
  from?: string | Date;
  /** Continue after this stream id (exclusive), as `LogPage.next` gives it. Wins over `from`. */
  after?: string;
  /**
   * Entries to return, 1 to 1000.
   * @default 50
   */
  count?: number;
  /** Only these event types. Filtering scans at most 10000 entries per call; `next` continues the scan. */
  events?: readonly string[];
  /**
   * Most bytes of entries (their ids, field names and values) one page
   * returns, 1 to 256 MiB; a page always holds at least one entry, and `next`
   * goes on after the last one.
   * @default 4 MiB (4194304)
   */
  maxBytes?: number;
}

export interface FollowOptions {
  /** Only these event types. */
  events?: readonly string[];
  /** Ends the iteration. */
  signal?: AbortSignal;
  /** Called once where each partition ends has been read: every entry appended after this is delivered. */
  onListening?: () => void;
}

/** A parked line of a group (`'key'` and `'unordered'` ordering): a failing head and the messages waiting behind it. */
export interface ParkedKey {
  /** The key whose messages wait (`''` for keyless ones). */
  key: string;
  partition: number;
  /** The head: the message tried at each redelivery. */
  offset: string;
  /** The head's event id and type; null when the log no longer has the entry. */
  eventId: string | null;
  event: string | null;
  /** Messages in the line, the head included. */
  count: number;
  /** Failed attempts of the head, in place and redelivered. */
  attempts: number;
  /** When the head first failed; null for a head not tried yet (its line moves on). */
  firstFailedAt: Date | null;
  /** When the head is tried next. */
  nextAttemptAt: Date;
  /** The head's last error, `Name: message`. */
  error: string;
}

export interface DeadLetterPage {
  /**
   * Dead letters to return, 1 to 10000.
   * @default 100
   */
  count?: number;
  /** Continue after this dead-letter id (in the listing's order), as the last item of the previous page gives it. */
  after?: string;
  /**
   * Newest first instead of oldest first.
   * @default false
   */
  newestFirst?: boolean;
  /**
   * Most bytes of dead letters (their ids, field names and values) one page
   * holds, 1 to 256 MiB; a page always holds at least one dead letter, so it
   * can hold fewer than `count` before the end.
   * @default 4 MiB (4194304)
   */
  maxBytes?: number;
}

/**
 * What the admin service asks of retention. `EventrailRetention` provides it
 * under `EVENTRAIL_RETENTION`, so admin never imports retention (which reads
 * group facts through admin).
 */
export interface RetentionOperations {
  runOnce(options: { onProgress?: ProgressListener }): Promise<RetentionRunResult>;
  restoreArchive(group: string, source: ArchiveSource, options: { onProgress?: ProgressListener }): Promise<number>;
  listArchives(options: { partition?: number }): Promise<ArchiveObject[]>;
}

/** Injection token under which `EventrailRetention` serves the admin service (`RetentionOperations`). */
export const EVENTRAIL_RETENTION = Symbol('EVENTRAIL_RETENTION');

/**
 * What the admin service reads of the resolved module options. Of retention only the stale threshold, as a
 * shape of its own: admin never imports retention.
 */
export type AdminView = ResolvedLogOptions & { retention?: { staleGroupMs: number }; tracing: ResolvedTracingOptions };
