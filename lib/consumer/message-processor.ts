import { Logger } from '@nestjs/common';
import type { EventrailMessage } from '../eventrail-message';
import type { ResolvedConsumerOptions } from '../eventrail.options';
import { HandlerTimeoutError } from '../errors/handler-timeout.error';
import { NonRetryableError } from '../errors/non-retryable.error';
import { CrashLoopError } from '../errors/crash-loop.error';
import { DecodeError } from '../errors/decode.error';
import { decodePayload, isMalformed, MalformedEntry, RawEntry } from '../log/codec';
import { escapeControls } from '../util/control-chars';
import { withTimeout } from '../util/timeout';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import { EventValidationError } from '../errors/event-validation.error';
import { validatedPayload } from './event-validation';
import { describeThrown, isInstanceOf } from '../util/describe-error';
import { retryDelayMs } from './backoff';
import type { GiveUpReason } from '../log/dead-letter.codec';
import type { FailedMessageSink } from './failed-message';
import type { HandlerBinding, HandlerMap } from './group-plan';
import type { MetricsHooks } from '../metrics/eventrail-metrics';
import type { Semaphore } from './semaphore';
import type { StopSignal } from './stop-signal';

/** How an entry ended: not done (a stop cut its retries short), handled, or given up (dead-lettered). */
export const ABANDONED = 0;
export const HANDLED = 1;
export const GIVEN_UP = 2;
export type Outcome = typeof ABANDONED | typeof HANDLED | typeof GIVEN_UP;

type Payload = ReturnType<typeof decodePayload>;

/**
 * Runs one entry through every handler the group has for its event type,
 * retries the failed ones in place with backoff, and hands what cannot be
 * handled to the dead-letter sink.
 */
export class MessageProcessor {
  private readonly logger = new Logger(MessageProcessor.name);

  constructor(
    private readonly group: string,
    private readonly handlers: HandlerMap,
    private readonly options: ResolvedConsumerOptions,
    private readonly sink: FailedMessageSink,
    /** The group's concurrency limit; the caller holds a permit while an entry runs. */
    private readonly semaphore: Semaphore,
    private readonly metrics: MetricsHooks,
  ) {}

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
      payload = decodePayload(entry);
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
    return Promise.resolve(result).then(
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
    const checked = await validatedPayload(schema, entry.event, payload);
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
    firstFailedAt = new Date(),
  ): Promise<Outcome> {
    const now = new Date();
    this.metrics.emit('onHandlerError', this.group, entry.event, error, attempt);
    if (isInstanceOf(error, NonRetryableError)) return this.giveUp(entry, partition, 'non-retryable', error, attempt, firstFailedAt, now);
    if (attempt > this.options.maxRetries) return this.giveUp(entry, partition, 'retries-exhausted', error, attempt, firstFailedAt, now);
    const delay = retryDelayMs(attempt, this.options.retryBackoffMs, this.options.retryBackoffMaxMs);
    this.logger.warn(
      escapeControls(
        `Event ${entry.id} (${entry.event}) failed in group "${this.group}" partition ${partition}, attempt ${attempt}; ` +
          `retrying in ${delay} ms: ${describe(error)}`,
      ),
    );
    // The permit goes back during the backoff, so other partitions of the group keep going.
    this.semaphore.release();
    let stopped: boolean;
    try {
      stopped = await stop.sleep(delay);
    } finally {
      await this.semaphore.acquire();
    }
    // Stopped, or the lease may have expired during the wait: the retry waits for a renewal or another owner.
    if (stopped || stop.stopped) return ABANDONED;
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
        this.logger.debug(escapeControls(`${handler.name} threw on event ${message.id} in group "${this.group}": ${describe(caught)}`));
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

  private message(entry: RawEntry, payload: Payload, partition: number, attempt: number): EventrailMessage {
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

  private async giveUp(
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
