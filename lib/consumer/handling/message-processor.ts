import { Logger } from '@nestjs/common';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { EventrailMessage } from '../../events/eventrail-message';
import type { ResolvedConsumerOptions } from '../consumer.options';
import { CrashLoopError } from '../../errors/crash-loop.error';
import { DecodeError } from '../../errors/decode.error';
import { EventValidationError } from '../../errors/event-validation.error';
import type { MetricsHooks } from '../../metrics/eventrail-metrics';
import { isMalformed, type MalformedEntry, type RawEntry } from '../../wire/codec';
import { escapeControls } from '../../util/control-chars';
import { logRecord } from '../../util/log-record';
import type { Semaphore } from '../../util/semaphore';
import type { StopSignal } from '../../util/stop-signal';
import type { FailureMemory } from '../coordination/failure-memory';
import { BatchProcessor } from './batch-processor';
import { Delivery, describe, type Parking, type Payload } from './delivery';
import { validatedPayload } from './event-validation';
import type { FailedMessageSink } from './failed-message';
import type { BatchBinding, HandlerBinding, HandlerMap } from './group-plan';
import { ABANDONED, HANDLED, type Outcome } from './outcome';
import { retryVerdict } from './retry-policy';

/**
 * Runs one entry through every handler the group has for its event type,
 * retries the failed ones in place with backoff, and hands what cannot be
 * handled to the dead-letter sink.
 */
export class MessageProcessor {
  private readonly logger = new Logger(MessageProcessor.name);
  private readonly delivery: Delivery;
  private readonly batches: BatchProcessor;
  /** True when the group has a batch handler: its batches then form within each fetch (`Fetch`). */
  readonly hasBatchHandlers: boolean;
  /** The largest `maxSize` of the group's batch handlers (0 without any): a read brings at least that many. */
  readonly largestBatch: number;

  constructor(
    private readonly group: string,
    private readonly handlers: HandlerMap,
    private readonly options: ResolvedConsumerOptions,
    sink: FailedMessageSink,
    /** The group's concurrency limit; the caller holds a permit while an entry runs. */
    semaphore: Semaphore,
    private readonly metrics: MetricsHooks,
    /** Where a failing message's first failure time is kept across workers (used with `maxRetryAgeMs` only). */
    memory?: FailureMemory,
    /** Where messages that ran out of retries in place are parked (`'key'` and `'unordered'` ordering). */
    parking?: Parking,
  ) {
    this.delivery = new Delivery(group, handlers, options, sink, semaphore, this.logger, memory, parking);
    this.batches = new BatchProcessor(group, options, metrics, this.delivery);
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

  /**
   * With `'key'` ordering, when the entry's key is parked in its partition: parks it behind (no call)
   * and answers true. False on the happy path after one size check.
   */
  parkedBehind(entry: RawEntry | MalformedEntry, partition: number): boolean {
    return this.delivery.parkedBehind(entry, partition);
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
    if (isMalformed(entry)) return this.delivery.giveUp(entry, partition, 'malformed', new DecodeError(entry.reason), 0, new Date());
    const handlers = this.handlers.get(entry.event);
    if (!handlers) return HANDLED;
    let payload: Payload;
    try {
      payload = this.delivery.decode(entry);
    } catch (error) {
      return this.delivery.giveUp(entry, partition, 'malformed', error, 0, new Date());
    }
    if (handlers[0].schema !== undefined) return this.validated(handlers[0].schema, entry, payload, handlers, partition, stop);
    if (handlers.length !== 1 || this.options.handlerTimeoutMs > 0) return this.attempt(entry, payload, handlers, partition, stop);
    const handler = handlers[0];
    let result: unknown;
    try {
      result = handler.call(this.delivery.message(entry, payload, partition, 1));
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

  /**
   * A parked head tried again (its redelivery), as attempt `attempt`: the general path; a batch
   * handler's event goes as a one-message batch.
   */
  async redeliver(entry: RawEntry | MalformedEntry, partition: number, stop: StopSignal, attempt: number): Promise<Outcome> {
    if (isMalformed(entry)) return this.delivery.giveUp(entry, partition, 'malformed', new DecodeError(entry.reason), 0, new Date());
    const handlers = this.handlers.get(entry.event);
    if (!handlers) return HANDLED;
    const batch = handlers[0].batch;
    if (batch) return (await this.batches.process([entry], batch, partition, stop, attempt))[0];
    let payload: Payload;
    try {
      payload = this.delivery.decode(entry);
    } catch (error) {
      return this.delivery.giveUp(entry, partition, 'malformed', error, 0, new Date());
    }
    if (handlers[0].schema !== undefined) return this.validated(handlers[0].schema, entry, payload, handlers, partition, stop, attempt);
    return this.attempt(entry, payload, handlers, partition, stop, attempt);
  }

  /** Dead-letters the entry after the committed offset without handling it: it crashed the process `deliveries` times. */
  giveUpCrashLoop(entry: RawEntry | MalformedEntry, partition: number, deliveries: number): Promise<Outcome> {
    const error = new CrashLoopError(deliveries, this.options.maxDeliveries);
    return this.delivery.giveUp(entry, partition, 'max-deliveries', error, deliveries, new Date());
  }

  /** Dead-letters a parked head an operator gave up (`EventrailAdmin.giveUpParked`), with its last error. */
  giveUpParked(
    entry: RawEntry | MalformedEntry,
    partition: number,
    attempts: number,
    firstFailedAt: Date,
    lastError: string,
  ): Promise<Outcome> {
    const error = new Error(`given up by an operator while parked; last error: ${lastError}`);
    return this.delivery.deadLetter(entry, partition, 'retries-exhausted', error, attempts, firstFailedAt, new Date());
  }

  /** A typed event: its schema checks (and parses) the data first; data that fails is dead-lettered at once as `invalid`. */
  private async validated(
    schema: StandardSchemaV1,
    entry: RawEntry,
    payload: Payload,
    handlers: readonly HandlerBinding[],
    partition: number,
    stop: StopSignal,
    attempt = 1,
  ): Promise<Outcome> {
    const started = performance.now();
    const checked = await validatedPayload(schema, entry.event, payload, this.options.handlerTimeoutMs);
    if (checked instanceof EventValidationError) return this.delivery.giveUp(entry, partition, 'invalid', checked, 0, new Date());
    // The check is part of the first attempt: its handlers get what is left of handlerTimeoutMs.
    const leftMs = this.options.handlerTimeoutMs - (performance.now() - started);
    return this.attempt(entry, checked, handlers, partition, stop, attempt, undefined, leftMs);
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
    leftMs?: number,
  ): Promise<Outcome> {
    const { failed, error } = await this.runHandlers(handlers, this.delivery.message(entry, payload, partition, attempt), leftMs);
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
    const firstFailedAt = firstFailure ?? (await this.delivery.failingSince(entry, partition, now, error));
    const verdict = retryVerdict(this.delivery.inPlace, attempt, error, firstFailedAt.getTime(), now.getTime());
    if ('giveUp' in verdict) return this.delivery.giveUp(entry, partition, verdict.giveUp, error, attempt, firstFailedAt, now);
    this.delivery.warnRetry(entry, partition, attempt, verdict.retryInMs, error);
    if (await this.delivery.pause(stop, verdict.retryInMs)) return ABANDONED;
    // Only the handlers that failed run again: the others already did their work.
    return this.attempt(entry, payload, failed, partition, stop, attempt + 1, firstFailedAt);
  }

  private async runHandlers(
    handlers: readonly HandlerBinding[],
    message: EventrailMessage,
    leftMs?: number,
  ): Promise<{ failed: HandlerBinding[]; error: unknown }> {
    const failed: HandlerBinding[] = [];
    let error: unknown;
    for (const handler of handlers) {
      try {
        // Fails the attempt with `HandlerTimeoutError` if the handler does not settle within `handlerTimeoutMs`.
        await this.delivery.timed(handler.name, () => handler.call(message), leftMs);
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
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}
