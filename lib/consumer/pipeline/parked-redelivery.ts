import { Logger } from '@nestjs/common';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import { isMalformed, readEntry, type EntryOrigin, type MalformedEntry, type RawEntry } from '../../wire/codec';
import { describeError } from '../../util/describe-error';
import { logRecord } from '../../util/log-record';
import type { Semaphore } from '../../util/semaphore';
import type { StopSignal } from '../../util/stop-signal';
import type { MessageProcessor } from '../handling/message-processor';
import { ABANDONED, HANDLED, PARKED, type Outcome } from '../handling/outcome';
import type { ParkedLines } from '../handling/parked-lines';
import type { GroupStats } from './group-stats';

type Entry = RawEntry | MalformedEntry;

/** Wait before trying again when a redelivery could not read its entry or store its line (Redis trouble). */
const TROUBLE_BACKOFF_MS = 1_000;

export interface ParkedRedeliveryParams {
  lines: ParkedLines;
  redis: EventrailRedis;
  streamKey: string;
  origin: EntryOrigin;
  group: string;
  partition: number;
  /** Tries a head never tried yet: retries in place first, then parks it again (the group's processor). */
  processor: MessageProcessor;
  /** Tries a head that already failed: one attempt, then it is parked again or dead-lettered. */
  retryProcessor: MessageProcessor;
  semaphore: Semaphore;
  stop: StopSignal;
  stats: GroupStats;
  maxDeliveries: number;
  /** Writes the lines' changes (and done-marks of `handledIds`) with a commit and waits for it: false when the lease was lost. */
  persist: (handledIds: readonly string[]) => Promise<boolean>;
  /** With idempotency: true when the event id is already done (handled elsewhere, or replayed twice). */
  isDone?: (entry: RawEntry) => Promise<boolean>;
}

/**
 * Brings a partition's parked messages back when their line falls due: one timer for the earliest due
 * line (nothing runs while nothing is parked, and nothing polls). A due line's head is read from the log
 * by its stream id and tried; when it succeeds (or is dead-lettered) the line's next message is tried at
 * once, in order, until the line is empty (released) or a head fails again (parked until its next tier).
 * Lines run side by side, each under a permit of the group's concurrency, so a slow head holds back
 * only its own line. Every change goes to Redis with a commit of the partition's lease, so it is fenced
 * like the offset.
 */
export class ParkedRedelivery {
  private readonly logger = new Logger(ParkedRedelivery.name);
  private timer?: NodeJS.Timeout;
  /** Lines being run now, each to its end (emptied, parked again, or stopped). */
  private readonly running = new Map<string, Promise<void>>();
  private stopped = false;

  constructor(private readonly params: ParkedRedeliveryParams) {}

  /** Starts every due line that is not running, and arms the timer for the next one; nothing after `stop`. */
  schedule(): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const { lines, redis, stop } = this.params;
    if (lines.size === 0) return;
    const { lines: due, nextAt } = lines.due(this.running);
    // Halted while the lease may have expired: look again a little later rather than spin.
    if (stop.stopped) {
      if (due.length > 0 || nextAt !== undefined) this.arm(TROUBLE_BACKOFF_MS);
      return;
    }
    for (const line of due) this.start(line);
    if (nextAt !== undefined) this.arm(Math.max(0, nextAt - redis.clock.now()));
  }

  /** No more lines start; resolves when the running ones ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await Promise.all(this.running.values());
  }

  private arm(waitMs: number): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.schedule();
    }, waitMs);
    this.timer.unref?.();
  }

  private start(line: string): void {
    const run = this.runLine(line)
      .catch((error: unknown) => {
        this.logger.error(this.record(`redelivery of parked line ${line} failed (${describeError(error)}); trying again later`));
        return this.params.stop.sleep(TROUBLE_BACKOFF_MS);
      })
      .then(() => {
        this.running.delete(line);
        this.schedule();
      });
    this.running.set(line, run);
  }

  /** Tries the heads of `line` in order until it is empty or a head is parked again; false when the round must end (stop, lost lease, trouble). */
  private async runLine(line: string): Promise<boolean> {
    const { lines, stats } = this.params;
    const handled: string[] = [];
    for (;;) {
      const state = lines.state(line);
      if (!state || this.stopped || this.params.stop.stopped) return this.flush(handled);
      const head = state.ids[0];
      const entry = await this.read(head);
      if (entry === 'trouble') return this.flush(handled, true);
      if (entry === undefined) {
        this.logger.error(
          this.record(`parked entry ${head} is no longer in the log (deleted or trimmed by hand); its line moves on without it`),
        );
        lines.release(line);
        continue;
      }
      // A member without a handler for it (a rolling deploy that removed one) passes it over, as a fetch does:
      // not handled, so no done-mark and no count.
      if (!this.params.processor.wants(entry)) {
        this.logger.debug(this.record(`parked entry ${head} has no handler in this member; passed over`));
        lines.release(line);
        continue;
      }
      // With idempotency: handled earlier in this line (its mark not sent yet), or marked done in Redis.
      const done =
        !isMalformed(entry) && this.params.isDone && (handled.includes(entry.id) || (await this.params.isDone(entry).catch(() => false)));
      if (done) {
        stats.skippedDuplicates++;
        lines.release(line);
        continue;
      }
      let outcome: Outcome;
      if (state.g === 1) {
        const firstFailedAt = new Date(state.f > 0 ? state.f : Date.now());
        outcome = await this.withPermit(() =>
          this.params.processor.giveUpParked(entry, this.params.partition, state.a, firstFailedAt, state.e),
        );
      } else if (state.c >= this.params.maxDeliveries) {
        outcome = await this.withPermit(() => this.params.processor.giveUpCrashLoop(entry, this.params.partition, state.c));
      } else {
        // Stored before it runs: a crash during the attempt is counted by the next owner.
        lines.starting(line);
        if (!(await this.params.persist(handled.splice(0)))) return false;
        // A head not tried yet gets the retries in place first; one that failed gets one attempt, numbered on.
        const processor = state.a === 0 ? this.params.processor : this.params.retryProcessor;
        outcome = await this.withPermit(() => processor.redeliver(entry, this.params.partition, this.params.stop, state.a + 1));
      }
      if (outcome === ABANDONED) {
        lines.abandoned(line);
        return this.flush(handled);
      }
      if (outcome === PARKED) {
        // The head's call ended and failed: noted for the recovery after a stall of this process (see StopSignal).
        this.params.stop.noteEnded(entry.offset);
        return this.flush(handled);
      }
      if (outcome === HANDLED) {
        stats.handled++;
        if (!isMalformed(entry)) handled.push(entry.id);
        lines.release(line);
      } else if (lines.isHead(entry)) {
        // Dead-lettered on a path that did not release it (a crash loop, a malformed entry).
        lines.release(line);
      }
    }
  }

  /** Stores what changed; on Redis trouble waits a little first (the line is tried again at the next round). */
  private async flush(handled: string[], trouble = false): Promise<boolean> {
    const ok = await this.params.persist(handled);
    if (trouble && ok) await this.params.stop.sleep(TROUBLE_BACKOFF_MS);
    return ok && !trouble;
  }

  /**
   * Runs `call` under a permit of the group's concurrency, unless a stop came meanwhile or the lease may
   * have expired (a freeze, a stall): checked after the permit, right before the call, as the fetch does.
   */
  private async withPermit(call: () => Outcome | Promise<Outcome>): Promise<Outcome> {
    const { semaphore, stop } = this.params;
    if (!semaphore.tryAcquire()) await semaphore.acquire();
    try {
      if (stop.stopped) return ABANDONED;
      return await call();
    } finally {
      semaphore.release();
    }
  }

  /** The entry at `id`, undefined when the log no longer has it, 'trouble' when Redis could not be asked. */
  private async read(id: string): Promise<Entry | undefined | 'trouble'> {
    const { redis, streamKey, origin } = this.params;
    try {
      const reply = await redis.client.xrange(streamKey, id, id);
      if (reply.length === 0) return undefined;
      const [offset, fields] = reply[0];
      return readEntry(offset, fields, origin);
    } catch (error) {
      this.logger.warn(this.record(`could not read parked entry ${id} (${describeError(error)}); trying again`));
      return 'trouble';
    }
  }

  private record(text: string): ReturnType<typeof logRecord> {
    const { group, partition } = this.params;
    return logRecord(`Group "${group}" partition ${partition}: ${text}`, { group, partition });
  }
}
