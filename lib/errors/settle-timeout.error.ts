import { EventrailError } from './eventrail.error';

/** A (group, partition) that had not committed up to the log's end as it was when `settled()` was called. */
export interface LaggingPartition {
  group: string;
  partition: number;
  /** Its committed offset when the wait gave up; null when no worker ever read the partition. */
  committed: string | null;
  /** The partition's last entry when `settled()` was called: what the group had to reach. */
  target: string;
  /** A worker of this process owned the partition when the wait gave up (otherwise another process, or nobody). */
  ownedHere: boolean;
  /**
   * Parked messages of the partition (`ordering: 'key'` or `'unordered'`) were not done yet: behind the
   * committed offset, so the partition can be at its target and still wait for them.
   */
  parked: boolean;
  /** How many, where a worker of this process held them; null where only Redis was read. */
  parkedCount: number | null;
}

/**
 * `EventrailConsumers.settled()` gave up: after `timeoutMs`, some groups of
 * this process had not handled (or dead-lettered) everything appended before
 * the call, or the consumers were not even running.
 */
export class SettleTimeoutError extends EventrailError {
  constructor(
    readonly timeoutMs: number,
    readonly lagging: readonly LaggingPartition[],
    readonly notRunning = false,
  ) {
    const shown = lagging
      .slice(0, 10)
      .map(
        (l) =>
          `group "${l.group}" partition ${l.partition} at ${l.committed ?? '(nothing committed)'} of ${l.target}` +
          (l.parked ? `, waiting for ${parkedText(l.parkedCount)}` : '') +
          (l.ownedHere ? '' : ' (not owned by this process)'),
      );
    const more = lagging.length > shown.length ? `, and ${lagging.length - shown.length} more` : '';
    super(
      notRunning
        ? `settled() timed out after ${timeoutMs} ms: the consumers of this process are not running (autoStart: false and no start(), or Redis is away)`
        : `settled() timed out after ${timeoutMs} ms; still behind: ${shown.join(', ')}${more}`,
    );
  }
}

function parkedText(count: number | null): string {
  if (count === null || count === 0) return 'parked messages';
  return count === 1 ? '1 parked message' : `${count} parked messages`;
}
