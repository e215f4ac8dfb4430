import { Logger } from '@nestjs/common';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { EventrailMessage } from '../../events/eventrail-message';
import type { ResolvedConsumerOptions } from '../consumer.options';
import { HandlerTimeoutError } from '../../errors/handler-timeout.error';
import { NonRetryableError } from '../../errors/non-retryable.error';
import { decodePayload, isMalformed, type MalformedEntry, type RawEntry } from '../../wire/codec';
import type { GiveUpReason } from '../../wire/dead-letter.codec';
import { escapeControls } from '../../util/control-chars';
import { describeThrown, isInstanceOf } from '../../util/describe-error';
import { logRecord } from '../../util/log-record';
import type { Semaphore } from '../../util/semaphore';
import type { StopSignal } from '../../util/stop-signal';
import { withTimeout } from '../../util/timeout';
import type { FailureMemory } from '../coordination/failure-memory';
import type { FailedMessageSink } from './failed-message';
import type { HandlerMap } from './group-plan';
import { GIVEN_UP, PARKED, type Outcome } from './outcome';
import type { ParkedLines } from './parked-lines';
import type { RetryLimits } from './retry-policy';

/** The parked lines of the partitions this process works (`'key'` and `'unordered'` ordering). */
export interface Parking {
  linesOf(partition: number): ParkedLines | undefined;
}

export type Payload = ReturnType<typeof decodePayload>;

/**
 * What single and batch handling share, so that both decode, build messages,
 * time handlers out, wait out a backoff, log a retry and give up the same way.
 * One per group; `MessageProcessor` and `BatchProcessor` each hold it.
 */
export class Delivery {
  /**
   * The retry budget in place. Where a parked stage follows (`'key'`, `'unordered'`) there is none: a
   * failing message is parked at its first failure and its quick retries are the first tiers of its
   * redelivery, so they never hold the fetch (and the other keys) they came from.
   */
  readonly inPlace: RetryLimits;

  constructor(
    readonly group: string,
    private readonly handlers: HandlerMap,
    private readonly options: ResolvedConsumerOptions,
    private readonly sink: FailedMessageSink,
    /** The group's concurrency limit; the caller holds a permit while an entry runs. */
    private readonly semaphore: Semaphore,
    /** Where a failing message's first failure time is kept across workers (used with `maxRetryAgeMs` only). */
    /** The processor's logger: retries and give-ups keep the `MessageProcessor` context that log filters know. */
    private readonly logger: Logger,
    private readonly memory?: FailureMemory,
    /** Where a failing message is parked instead of retried in place and dead-lettered; absent with `'partition'` ordering. */
    private readonly parking?: Parking,
  ) {
    this.inPlace = parking ? { ...options, maxRetries: 0, maxRetryAgeMs: 0 } : options;
  }

  /** With `'key'` ordering, when `entry`'s key is parked in its partition: parks it behind the line (no call) and answers true. */
  parkedBehind(entry: RawEntry | MalformedEntry, partition: number, exceptHead = false): boolean {
    const lines = this.parking?.linesOf(partition);
    if (!lines) return false;
    // Read again after a take-over (`'unordered'`): its line redelivers it; the fetch leaves it.
    if (!lines.holds(entry)) return !exceptHead && lines.has(entry);
    // A line's own head, being redelivered (as a one-message batch), does not wait behind itself.
    if (exceptHead && lines.isHead(entry)) return false;
    lines.behind(entry);
    return true;
  }

  /** The one place an entry's payload is read, for single and batch handlers alike. Throws when it cannot be decoded. */
  decode(entry: RawEntry): Payload {
    return decodePayload(entry);
  }

  /**
   * The schema the group's handlers of this entry's event share (see the
   * explorer's `shareSchema`), if the event is typed. A batch handler taking
   * several events may have one per event.
   */
  schemaOf(entry: RawEntry): StandardSchemaV1 | undefined {
    return this.handlers.get(entry.event)?.[0]?.schema;
  }

  message(entry: RawEntry, payload: Payload, partition: number, attempt: number): EventrailMessage {
    return {
      id: entry.id,
      event: entry.event,
      data: payload.data,
      key: entry.key,
      headers: payload.headers,
      publishedAt: new Date(entry.time),
      partition,
      offset: entry.offset,
      group: this.group,
      attempt,
    };
  }

  /**
   * Runs `call` (a handler named `name`), failing with `HandlerTimeoutError` if it does not settle within `handlerTimeoutMs`,
   * or within `leftMs` when the attempt's schema checks already spent part of it (none left: it fails without the call).
   */
  async timed<T>(name: string, call: () => T | PromiseLike<T>, leftMs?: number): Promise<T> {
    const timeoutMs = this.options.handlerTimeoutMs;
    if (timeoutMs <= 0) return call();
    if (leftMs !== undefined && leftMs <= 0) throw new HandlerTimeoutError(name, timeoutMs);
    return withTimeout(Promise.resolve().then(call), Math.min(leftMs ?? timeoutMs, timeoutMs), () => {
      throw new HandlerTimeoutError(name, timeoutMs);
    });
  }

  /**
   * Since when the entry has been failing: in any worker when retrying by
   * time (the budget survives restarts and takeovers), else from `now`. Not
   * asked for an error that gives the message up at once.
   */
  async failingSince(entry: RawEntry, partition: number, now: Date, error: unknown): Promise<Date> {
    if (this.options.maxRetryAgeMs <= 0 || !this.memory || isInstanceOf(error, NonRetryableError)) return now;
    return this.memory.failingSince(partition, entry.offset, now);
  }

  /**
   * Waits a retry's backoff. The permit goes back meanwhile, so other
   * partitions of the group keep going. True when the retry must not run:
   * stopped, or the lease may have expired during the wait (the retry then
   * waits for a renewal or another owner).
   */
  async pause(stop: StopSignal, ms: number): Promise<boolean> {
    this.semaphore.release();
    let stopped: boolean;
    try {
      stopped = await stop.sleep(ms);
    } finally {
      await this.semaphore.acquire();
    }
    return stopped || stop.stopped;
  }

  /** The retry warning: readable text, and the message's identifiers as fields. */
  warnRetry(entry: RawEntry, partition: number, attempt: number, delayMs: number, error: unknown, batchSize?: number): void {
    const what =
      batchSize === undefined ? `Event ${entry.id} (${entry.event})` : `Batch of ${batchSize} from event ${entry.id} (${entry.event})`;
    const msg = escapeControls(
      `${what} failed in group "${this.group}" partition ${partition}, attempt ${attempt}; retrying in ${delayMs} ms: ${describe(error)}`,
    );
    this.logger.warn(
      logRecord(msg, {
        group: this.group,
        partition,
        eventId: entry.id,
        event: entry.event,
        offset: entry.offset,
        attempt,
        delayMs,
        ...(batchSize !== undefined && { batchSize }),
      }),
    );
  }

  async giveUp(
    entry: RawEntry | MalformedEntry,
    partition: number,
    reason: GiveUpReason,
    error: unknown,
    attempts: number,
    firstFailedAt: Date,
    lastFailedAt = firstFailedAt,
  ): Promise<Outcome> {
    const lines = this.parking?.linesOf(partition);
    if (lines && reason === 'retries-exhausted' && !isMalformed(entry)) {
      if (lines.failed(entry, { error, attempts, firstFailedAt }) === 'parked') {
        this.warnParked(entry, partition, lines, error);
        return PARKED;
      }
      // Its parked stage ran out: the dead letter says since when it has been failing, redeliveries included.
      const state = lines.state(lines.lineOf(entry));
      if (state && state.f > 0) return this.deadLetter(entry, partition, reason, error, state.a, new Date(state.f), lastFailedAt);
    }
    return this.deadLetter(entry, partition, reason, error, attempts, firstFailedAt, lastFailedAt);
  }

  /** Writes the dead letter (never parks); the head of a parked line is released, and the next message of its line takes its place. */
  async deadLetter(
    entry: RawEntry | MalformedEntry,
    partition: number,
    reason: GiveUpReason,
    error: unknown,
    attempts: number,
    firstFailedAt: Date,
    lastFailedAt = firstFailedAt,
  ): Promise<Outcome> {
    await this.sink.accept({ group: this.group, partition, entry, reason, error, attempts, firstFailedAt, lastFailedAt });
    const lines = this.parking?.linesOf(partition);
    if (lines?.isHead(entry)) lines.release(lines.lineOf(entry));
    return GIVEN_UP;
  }

  private warnParked(entry: RawEntry, partition: number, lines: ParkedLines, error: unknown): void {
    const line = lines.lineOf(entry);
    const state = lines.state(line);
    const inMs = state ? Math.max(0, state.n - Date.now()) : 0;
    const what = `parked (key ${JSON.stringify(entry.key ?? null)}${line.startsWith('k:') ? ', its later messages wait behind it' : ''})`;
    const msg = escapeControls(
      `Event ${entry.id} (${entry.event}) failed in group "${this.group}" partition ${partition} after ${state?.a ?? 0} attempts; ${what}, next try in about ${Math.round(inMs / 1000)} s: ${describe(error)}`,
    );
    this.logger.warn(
      logRecord(msg, {
        group: this.group,
        partition,
        eventId: entry.id,
        event: entry.event,
        offset: entry.offset,
        attempt: state?.a,
        key: entry.key,
      }),
    );
  }
}

/** An error for a log line, built without throwing whatever was thrown; the caller escapes the line (error messages may carry producers' data). */
export function describe(error: unknown): string {
  const { name, message } = describeThrown(error);
  return `${name}: ${message}`;
}
