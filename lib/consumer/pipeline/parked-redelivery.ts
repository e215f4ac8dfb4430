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
/**
 * Lines run at once in a partition (twice the group's concurrency when that is more). Every handler call
 * waits for a permit of the group's concurrency in turn, the fetch's too: 20,000 lines falling due
 * together, all started, put a healthy key's message behind 20,000 failing calls (2-4 s). More lines
 * than permits only keep the permits busy while others wait for Redis; the rest wait, oldest due first.
 */
const LINES_AT_ONCE = 128;

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
  /** How many messages of a line run between two writes of it (the group's batch size). */
  batchSize: number;
  /** The group's concurrency (the permits of `semaphore`). */
  concurrency: number;
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
  /**
   * Lines a dead owner left running (a crash was counted on their head): their next `batchSize` messages
   * run one at a time, each stored as running before it starts, so a message that crashes the process is
   * the one counted (as the fetch does after a crash, see RecoveryWindow). Left: messages to go so.
   */
  private readonly careful = new Map<string, number>();
  private stopped = false;

  private readonly maxRunning: number;

  constructor(private readonly params: ParkedRedeliveryParams) {
    this.maxRunning = Math.max(LINES_AT_ONCE, 2 * params.concurrency);
  }

  /**
   * Starts the due lines that are not running, oldest due first, as many as may run at once, and arms
   * the timer for the next one (a line that ends calls it again); nothing after `stop`.
   */
  schedule(): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const { lines, redis, stop } = this.params;
    if (lines.size === 0) return;
    // Halted while the lease may have expired: look again a little later rather than spin.
    if (stop.stopped) {
      this.arm(TROUBLE_BACKOFF_MS);
      return;
    }
    const room = this.maxRunning - this.running.size;
    if (room <= 0) return;
    const { lines: due, nextAt } = lines.due(this.running, room);
    for (const line of due) this.start(line);
    const now = redis.clock.now();
    // Lines left due because as many run as may: the end of one starts the next, no timer needed.
    if (nextAt !== undefined && (nextAt > now || this.running.size < this.maxRunning)) this.arm(Math.max(0, nextAt - now));
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
        if (this.params.lines.state(line)) this.params.lines.requeue(line);
        else this.careful.delete(line);
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
      if (state.c > 0) this.careful.set(line, this.params.batchSize);
      const careful = this.careful.get(line) ?? 0;
      if (careful === 0 && state.a === 0 && state.g !== 1) {
        const step = await this.runBatch(line, handled);
        if (step !== 'next') return step;
        continue;
      }
      if (careful > 1) this.careful.set(line, careful - 1);
      else this.careful.delete(line);
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
      if (outcome === PARKED) return this.flush(handled);
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

  /**
   * A line whose head was never tried (its earlier head was just done): up to `batchSize` of its messages,
   * in order, each once through the group's processor (retries in place, then parked again), with the
   * line written once before them (marked running, so a crash is counted) and its releases with the next
   * write. Written once per message, a line of N messages cost N writes of up to N ids. A crash handles
   * at most this batch again (idempotency dedups it). `next` when the line goes on (another batch, or a
   * head to try on its own), else what `runLine` returns.
   */
  private async runBatch(line: string, handled: string[]): Promise<'next' | boolean> {
    const { lines, stats, partition, stop } = this.params;
    lines.starting(line);
    if (!(await this.params.persist(handled.splice(0)))) return false;
    const ids = lines.state(line)?.ids.slice(0, this.params.batchSize) ?? [];
    const entries = await this.readAll(ids);
    if (entries === 'trouble') {
      lines.abandoned(line);
      return this.flush(handled, true);
    }
    const done = await this.doneOf(entries);
    for (const [i, id] of ids.entries()) {
      const state = lines.state(line);
      // The line changed under the batch (an operator's give-up, a head done elsewhere): the caller looks again.
      if (!state || state.ids[0] !== id || state.g === 1) break;
      if (this.stopped || stop.stopped) {
        lines.abandoned(line);
        return this.flush(handled);
      }
      const entry = entries[i];
      if (entry === undefined) {
        this.logger.error(
          this.record(`parked entry ${id} is no longer in the log (deleted or trimmed by hand); its line moves on without it`),
        );
        this.releaseRunning(line);
        continue;
      }
      if (!this.params.processor.wants(entry)) {
        this.logger.debug(this.record(`parked entry ${id} has no handler in this member; passed over`));
        this.releaseRunning(line);
        continue;
      }
      if (!isMalformed(entry) && (done.has(entry.id) || handled.includes(entry.id))) {
        stats.skippedDuplicates++;
        this.releaseRunning(line);
        continue;
      }
      const outcome = await this.withPermit(() => this.params.processor.redeliver(entry, partition, stop, 1));
      if (outcome === ABANDONED) {
        lines.abandoned(line);
        return this.flush(handled);
      }
      if (outcome === PARKED) return this.flush(handled);
      if (outcome === HANDLED) {
        stats.handled++;
        if (!isMalformed(entry)) handled.push(entry.id);
        this.releaseRunning(line);
      } else if (lines.isHead(entry)) {
        this.releaseRunning(line);
      }
    }
    if (lines.state(line)?.r === 1) lines.abandoned(line);
    return 'next';
  }

  /** The head of `line` is done and the batch goes on: its next head is marked running, as the batch's first was. */
  private releaseRunning(line: string): void {
    const { lines } = this.params;
    lines.release(line);
    if (lines.state(line)) lines.starting(line);
  }

  /** The entries at `ids` (undefined where the log no longer has one), read side by side; 'trouble' when Redis could not be asked. */
  private async readAll(ids: readonly string[]): Promise<Array<Entry | undefined> | 'trouble'> {
    const { redis, streamKey, origin } = this.params;
    try {
      const replies = await Promise.all(ids.map((id) => redis.client.xrange(streamKey, id, id)));
      return replies.map((reply) => (reply.length === 0 ? undefined : readEntry(reply[0][0], reply[0][1], origin)));
    } catch (error) {
      this.logger.warn(this.record(`could not read parked entries from ${ids[0]} (${describeError(error)}); trying again`));
      return 'trouble';
    }
  }

  /** With idempotency: the event ids among `entries` already marked done (a lookup that fails counts as not done). */
  private async doneOf(entries: ReadonlyArray<Entry | undefined>): Promise<Set<string>> {
    const done = new Set<string>();
    const isDone = this.params.isDone;
    if (!isDone) return done;
    const raw = entries.filter((entry): entry is RawEntry => entry !== undefined && !isMalformed(entry));
    const verdicts = await Promise.all(raw.map((entry) => isDone(entry).catch(() => false)));
    verdicts.forEach((verdict, i) => verdict && done.add(raw[i].id));
    return done;
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
