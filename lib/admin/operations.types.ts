/**
 * Types shared by the admin service and the modules that do the work behind
 * it (retention, archives): a neutral home, so neither folder imports the
 * other for them.
 */

/** Reports progress of long operations: `done` of `total` units (total is null when unknown). */
export type ProgressListener = (done: number, total: number | null) => void;

/** One archive object: a gzipped JSONL file of consecutive entries of one partition. */
export interface ArchiveObject {
  /** `<prefix>/p<partition>/<firstId>_<lastId>.jsonl.gz`, relative to the archive directory or bucket prefix. */
  name: string;
  partition: number;
  firstId: string;
  lastId: string;
}

export interface ArchivedRange extends ArchiveObject {
  /** Entries in the object. */
  count: number;
}

/** What a cycle did to one partition. */
export interface PartitionRetentionResult {
  partition: number;
  /** MINID that `maxLen` / `maxAgeMs` asked for (entries below it go), or null when they ask nothing. */
  requestedMinId: string | null;
  /** MINID after the cap by live groups' committed offsets: what the cycle trimmed to, or null for no trim. */
  minId: string | null;
  /** Live groups whose committed offset lowered the MINID (they still need entries the policy would remove). */
  heldBackBy: string[];
  /** Objects written by this cycle, in id order. */
  archived: ArchivedRange[];
  /** Entries removed by `XTRIM`. */
  trimmed: number;
  /**
   * Why less was trimmed than the MINID asked: a failed archive (the partition was left as it was), or
   * entries not archived on an archived log, with no archive here (`minId` is then capped at the highest
   * archive mark).
   */
  error?: string;
}

export interface RetentionRunResult {
  /** False when another instance held the retention lock: this call did nothing. */
  ran: boolean;
  /** Groups whose members have all been gone longer than `staleGroupMs`: they no longer hold the log back. */
  staleGroups: string[];
  partitions: PartitionRetentionResult[];
  /** Dead letters removed per group by `deadLetterMaxLen` (groups with nothing removed are left out). */
  deadLetters: Array<{ group: string; trimmed: number }>;
}

/**
 * What to restore: an archive name (as `ArchiveObject.name`), several names, or every archived entry in a
 * range, optionally of one partition. `from` and `to` are stream ids or dates, both inclusive.
 */
export type ArchiveSource = string | readonly string[] | { partition?: number; from?: string | Date; to?: string | Date };
