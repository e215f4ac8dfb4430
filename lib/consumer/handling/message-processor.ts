import { Logger } from '@nestjs/common';
import type { EventrailMessage } from '../../events/eventrail-message';
import type { ResolvedConsumerOptions } from '../../module/eventrail.options';
import { HandlerTimeoutError } from '../../errors/handler-timeout.error';
import { CrashLoopError } from '../../errors/crash-loop.error';
import { NonRetryableError } from '../../errors/non-retryable.error';
import { DecodeError } from '../../errors/decode.error';
import { decodePayload, isMalformed, MalformedEntry, RawEntry } from '../../wire/codec';
import { escapeControls } from '../../util/control-chars';
import { withTimeout } from '../../util/timeout';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import { EventValidationError } from '../../errors/event-validation.error';
import { validatedPayload } from './event-validation';
import { describeThrown, isInstanceOf } from '../../util/describe-error';
import type { GiveUpReason } from '../../wire/dead-letter.codec';
import type { FailedMessageSink } from './failed-message';
import type { FailureMemory } from '../coordination/failure-memory';
import type { BatchBinding, HandlerBinding, HandlerMap } from '../lifecycle/group-plan';
import type { MetricsHooks } from '../../metrics/eventrail-metrics';
import type { Semaphore } from '../../util/semaphore';
import type { StopSignal } from '../../util/stop-signal';
import { ABANDONED, HANDLED, GIVEN_UP, type Outcome } from './outcome';
import { BatchProcessor, type DeliveryTools } from './batch-processor';
import { retryVerdict } from './retry-policy';
import { logRecord } from '../../util/log-record';

/** Re-exported from their own file (batch-processor.ts needs them without importing this one). */
export { ABANDONED, HANDLED, GIVEN_UP, type Outcome };

export type Payload = ReturnType<typeof decodePayload>;

/**
 * Runs one entry through every handler the group has for its event type,
 * retries the failed ones in place with backoff, and hands what cannot be
 * handled to the dead-letter sink.
 */
export class MessageProcessor implements DeliveryTools {
  private readonly logger = new Logger(MessageProcessor.name);
  private readonly batches: BatchProcessor;
  /** True when the group has a batch handler: batches then form in `BatchRun`. */
  readonly hasBatchHandlers: boolean;
  /** The largest `maxSize` of the group's batch handlers (0 without any): a read brings at least that many. */
  readonly largestBatch: number;

  constructor(
    private readonly group: string,
    private readonly handlers: HandlerMap,
    private readonly options: ResolvedConsumerOptions,
    private readonly sink: FailedMessageSink,
    /** The group's concurrency limit; the caller holds a permit while an entry runs. */
    private readonly semaphore: Semaphore,
    private readonly metrics: MetricsHooks,
    /** Where a failing message's first failure time is kept across workers (used with `maxRetryAgeMs` only). */
    private readonly memory?: FailureMemory,
  ) {
    this.batches = new BatchProcessor(group, options, metrics, this);
    const sizes = [...handlers.values()].flatMap((list) => list.flatMap((b) => (b.batch ? [b.batch.maxSize] : [])));
    this.hasBatchHandlers = sizes.length > 0;
    this.largestBatch = Math.max(0, ...sizes);
  }

  /** The batch handler of this entry's event, if a batch handler handles it (it is then its only handler). */
  batchOf(entry: RawEntry | MalformedEntry): BatchBinding | undefined {
    return isMalformed(entry) ? undefined : this.handlers.get(entry.event)?.[0]?.batch;
  }

  /**
   * Runs `entries` (consecutive, wanted, well-formed entries of one partition
   * whose events `binding` handles) through the batch handler; the caller
   * holds a permit. One outcome per entry.
   */
  processBatch(entries: readonly RawEntry[], binding: BatchBinding, partition: number, stop: StopSignal): Promise<Outcome[]> {
    return this.batches.process(entries, binding, partition, stop);
  }

  /** True when the group handles this entry; other entries are done without a call. */
  wants(entry: RawEntry | MalformedEntry): boolean {
    if (entry.to !== undefined && entry.to !== this.group) return false;
    // A malformed entry has no event type to filter on: every group it is for dead-letters it.
    return isMalformed(entry) || this.handlers.has(entry.event);
  }

  /**
   * The first attempt runs without an extra async frame: a synchronous handler
   * costs no promise at all, an async one exactly its own. Failures, timeouts
   * and several handlers per event take the general path.
   */
  process(entry: RawEntry | MalformedEntry, partition: number, stop: StopSignal): Outcome | Promise<Outcome> {
    if (isMalformed(entry)) return this.giveUp(entry, partition, 'malformed', new DecodeError(entry.reason), 0, new Date());
    const handlers = this.handlers.get(entry.event);
    if (!handlers) return HANDLED;
    let payload: Payload;
    try {
      payload = this.decode(entry);
    } catch (error) {
      return this.giveUp(entry, partition, 'malformed', error, 0, new Date());
    }
    if (handlers[0].schema !== undefined) return this.validated(handlers[0].schema, entry, payload, handlers, partition, stop);
    if (handlers.length !== 1 || this.options.handlerTimeoutMs > 0) return this.attempt(entry, payload, handlers, partition, stop);
    const handler = handlers[0];
    let result: unknown;
    try {
      result = handler.call(this.message(entry, payload, partition, 1));
    } catch (error) {
      return this.afterFailure(entry, payload, [handler], partition, stop, error, 1);
    }
    if (!isThenable(result)) return HANDLED;
    // A native promise is chained as it is; any other thenable is adopted first.
    return (result instanceof Promise ? result : Promise.resolve(result)).then(
      () => HANDLED,
      (error: unknown) => this.afterFailure(entry, payload, [handler], partition, stop, error, 1),
    );
  }

  /** Dead-letters the entry after the committed offset without handling it: it crashed the process `deliveries` times. */
  giveUpCrashLoop(entry: RawEntry | MalformedEntry, partition: number, deliveries: number): Promise<Outcome> {
    const error = new CrashLoopError(deliveries, this.options.maxDeliveries);
    return this.giveUp(entry, partition, 'max-deliveries', error, deliveries, new Date());
  }

  /** A typed event: its schema checks (and parses) the data first; data that fails is dead-lettered at once as `invalid`. */
  private async validated(
    schema: StandardSchemaV1,
    entry: RawEntry,
    payload: Payload,
    handlers: readonly HandlerBinding[],
    partition: number,
    stop: StopSignal,
  ): Promise<Outcome> {
    const checked = await validatedPayload(schema, entry.event, payload, this.options.handlerTimeoutMs);
    if (checked instanceof EventValidationError) return this.giveUp(entry, partition, 'invalid', checked, 0, new Date());
    return this.attempt(entry, checked, handlers, partition, stop);
  }

  /** Runs `handlers` for attempt `attempt` and onwards, until they all succeed or the message is given up. */
  private async attempt(
    entry: RawEntry,
    payload: Payload,
    handlers: readonly HandlerBinding[],
    partition: number,
    stop: StopSignal,
    attempt = 1,
    firstFailedAt?: Date,
  ): Promise<Outcome> {
    const { failed, error } = await this.runHandlers(handlers, this.message(entry, payload, partition, attempt));
    if (failed.length === 0) return HANDLED;
    return this.afterFailure(entry, payload, failed, partition, stop, error, attempt, firstFailedAt);
  }

  /** Gives the message up, or waits the backoff and runs the failed handlers again. */
  private async afterFailure(
    entry: RawEntry,
    payload: Payload,
    failed: readonly HandlerBinding[],
    partition: number,
    stop: StopSignal,
    error: unknown,
    attempt: number,
    firstFailure?: Date,
  ): Promise<Outcome> {
    const now = new Date();
    this.metrics.emit('onHandlerError', this.group, entry.event, error, attempt);
    const firstFailedAt = firstFailure ?? (await this.failingSince(entry, partition, now, error));
    const verdict = retryVerdict(this.options, attempt, error, firstFailedAt.getTime(), now.getTime());
    if ('giveUp' in verdict) return this.giveUp(entry, partition, verdict.giveUp, error, attempt, firstFailedAt, now);
    this.warnRetry(entry, partition, attempt, verdict.retryInMs, error);
    if (await this.pause(stop, verdict.retryInMs)) return ABANDONED;
    // Only the handlers that failed run again: the others already did their work.
    return this.attempt(entry, payload, failed, partition, stop, attempt + 1, firstFailedAt);
  }

  private async runHandlers(
    handlers: readonly HandlerBinding[],
    message: EventrailMessage,
  ): Promise<{ failed: HandlerBinding[]; error: unknown }> {
    const failed: HandlerBinding[] = [];
    let error: unknown;
    for (const handler of handlers) {
      try {
        await this.call(handler, message);
      } catch (caught) {
        failed.push(handler);
        error = caught;
        const msg = escapeControls(`${handler.name} threw on event ${message.id} in group "${this.group}": ${describe(caught)}`);
        const { group, partition, id: eventId, event, offset, attempt } = message;
        this.logger.debug(logRecord(msg, { group, partition, eventId, event, offset, attempt, handler: handler.name }));
      }
    }
    return { failed, error };
  }

  /** Calls a handler, failing the attempt with `HandlerTimeoutError` if it does not settle within `handlerTimeoutMs`. */
  private async call(handler: HandlerBinding, message: EventrailMessage): Promise<void> {
    const timeoutMs = this.options.handlerTimeoutMs;
    if (timeoutMs <= 0) {
      await handler.call(message);
      return;
    }
    await withTimeout(
      Promise.resolve().then(() => handler.call(message)),
      timeoutMs,
      () => {
        throw new HandlerTimeoutError(handler.name, timeoutMs);
      },
    );
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

  /** The schema the group's handlers of this entry's event share (see the explorer's `shareSchema`), if the event is typed. */
  schemaOf(entry: RawEntry): StandardSchemaV1 | undefined {
    return this.handlers.get(entry.event)?.[0]?.schema;
  }

  /** The one place an entry's payload is read, for single and batch handlers alike. Throws when it cannot be decoded. */
  decode(entry: RawEntry): Payload {
    return decodePayload(entry);
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

  async giveUp(
    entry: RawEntry | MalformedEntry,
    partition: number,
    reason: GiveUpReason,
    error: unknown,
    attempts: number,
    firstFailedAt: Date,
    lastFailedAt = firstFailedAt,
  ): Promise<Outcome> {
    await this.sink.accept({ group: this.group, partition, entry, reason, error, attempts, firstFailedAt, lastFailedAt });
    return GIVEN_UP;
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

/** An error for a log line, built without throwing whatever was thrown; the caller escapes the line (error messages may carry producers' data). */
function describe(error: unknown): string {
  const { name, message } = describeThrown(error);
  return `${name}: ${message}`;
}
