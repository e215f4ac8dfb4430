import { Logger } from '@nestjs/common';
import type { MalformedEntry, RawEntry } from '../../wire/codec';
import { describeError } from '../../util/describe-error';
import { logRecord } from '../../util/log-record';
import type { PartitionLease } from './lease';

/** Where an entry that crashed the process too often goes: the group's handling dead-letters it unhandled. */
export interface CrashLoopSink {
  giveUpCrashLoop(entry: RawEntry | MalformedEntry, partition: number, deliveries: number): Promise<unknown>;
}

/** What to do with the entry after the committed offset while recovering. */
export type DeliveryVerdict = 'handle' | 'dead-lettered' | 'retry';

/**
 * Crash-loop detection, paid for only after a takeover. When a worker takes
 * over a partition whose previous owner, another process, did not release it
 * (it died, or froze or lost Redis long enough; a process taking back its
 * own lapsed lease counts nothing, see GroupConsumer), entries go one at a
 * time for one batch's length: each is counted in Redis before it starts and
 * committed before the next, so a
 * message that kills every worker that handles it is the one whose count
 * grows, and it is dead-lettered unhandled once it reaches `maxDeliveries`.
 * The happy path counts nothing.
 */
export class RecoveryWindow {
  private readonly logger = new Logger(RecoveryWindow.name);

  constructor(
    /** Entries still to go one at a time; 0 when the lease was released cleanly. */
    private remaining: number,
    private readonly lease: PartitionLease,
    private readonly maxDeliveries: number,
    private readonly sink: CrashLoopSink,
    /** The group's counters (`GroupStats`): a crash-looping entry counts as dead-lettered. */
    private readonly stats: { deadLettered: number },
  ) {}

  get active(): boolean {
    return this.remaining > 0;
  }

  /** Entries to read at once: one while recovering, else a full batch. */
  readSize(batchSize: number): number {
    return this.remaining > 0 ? 1 : batchSize;
  }

  /** `entries` were taken on (handled, or dead-lettered unhandled). */
  consume(entries: number): void {
    this.remaining = Math.max(0, this.remaining - entries);
  }

  /**
   * Counts this delivery of `entry`; at `maxDeliveries` the entry has killed
   * enough workers and goes to the dead-letter stream instead. `retry` when
   * Redis could not be asked.
   */
  async countDelivery(entry: RawEntry | MalformedEntry): Promise<DeliveryVerdict> {
    try {
      const deliveries = await this.lease.countDelivery(entry.offset);
      if (deliveries > 1 && deliveries < this.maxDeliveries) {
        // The entry was started before by a worker that never finished it: what an operator sees a crash loop by.
        const { group, partition } = this.lease;
        const msg = `Group "${group}" partition ${partition}: entry ${entry.offset} delivered ${deliveries} times to workers that did not finish it (dead-lettered at maxDeliveries ${this.maxDeliveries})`;
        this.logger.warn(logRecord(msg, { group, partition, offset: entry.offset, deliveries }));
      }
      if (deliveries < this.maxDeliveries) return 'handle';
      await this.sink.giveUpCrashLoop(entry, this.lease.partition, deliveries);
      this.stats.deadLettered++;
      return 'dead-lettered';
    } catch (error) {
      const { group, partition } = this.lease;
      const msg = `Group "${group}" partition ${partition}: could not count the delivery of ${entry.offset} (${describeError(error)}); retrying`;
      this.logger.warn(logRecord(msg, { group, partition, offset: entry.offset }));
      return 'retry';
    }
  }
}
