import { Logger } from '@nestjs/common';
import type { EventrailMessage } from '../eventrail-message';
import type { ResolvedConsumerOptions } from '../eventrail.options';
import { NonRetryableError } from '../errors/non-retryable.error';
import { decodePayload, DecodeError, isMalformed, MalformedEntry, RawEntry } from '../log/codec';
import { retryDelayMs } from './backoff';
import type { FailedMessageSink } from './failed-message';
import type { HandlerBinding, HandlerMap } from './handler-binding';
import type { StopSignal } from './stop-signal';

/**
 * Runs one entry through every handler the group has for its event type, and
 * retries the failed ones in place with backoff. Returns true when the entry is
 * done (handled, skipped or given up), false when a stop interrupted its retries
 * (then it is not done, and the next owner delivers it again).
 */
export class MessageProcessor {
  private readonly logger = new Logger(MessageProcessor.name);

  constructor(
    private readonly group: string,
    private readonly handlers: HandlerMap,
    private readonly options: ResolvedConsumerOptions,
    private readonly sink: FailedMessageSink,
  ) {}

  /** True when the group has a handler for this entry; other entries are done without a call. */
  wants(entry: RawEntry | MalformedEntry): boolean {
    return isMalformed(entry) || this.handlers.has(entry.event);
  }

  /**
   * The first attempt runs without an extra async frame: a synchronous handler
   * costs no promise at all, an async one exactly its own. Failures and
   * several handlers per event take the general path.
   */
  process(entry: RawEntry | MalformedEntry, partition: number, stop: StopSignal): boolean | Promise<boolean> {
    if (isMalformed(entry))
      return this.giveUp(entry, partition, 'malformed', new DecodeError(entry.reason), 0, new Date()).then(() => true);
    const handlers = this.handlers.get(entry.event);
    if (!handlers) return true;
    let payload: Payload;
    try {
      payload = decodePayload(entry);
    } catch (error) {
      return this.giveUp(entry, partition, 'malformed', error, 0, new Date()).then(() => true);
    }
    if (handlers.length !== 1) return this.attempt(entry, payload, handlers, partition, stop);
    const handler = handlers[0];
    let result: unknown;
    try {
      result = handler.call(this.message(entry, payload, partition, 1));
    } catch (error) {
      return this.afterFailure(entry, payload, [handler], partition, stop, error, 1);
    }
    if (!isThenable(result)) return true;
    return Promise.resolve(result).then(
      () => true,
      (error: unknown) => this.afterFailure(entry, payload, [handler], partition, stop, error, 1),
    );
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
  ): Promise<boolean> {
    const { failed, error } = await this.runHandlers(handlers, this.message(entry, payload, partition, attempt));
    if (failed.length === 0) return true;
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
  ): Promise<boolean> {
    const now = new Date();
    if (error instanceof NonRetryableError) {
      await this.giveUp(entry, partition, 'non-retryable', error, attempt, firstFailedAt, now);
      return true;
    }
    if (attempt > this.options.maxRetries) {
      await this.giveUp(entry, partition, 'retries-exhausted', error, attempt, firstFailedAt, now);
      return true;
    }
    const delay = retryDelayMs(attempt, this.options.retryBackoffMs, this.options.retryBackoffMaxMs);
    this.logger.warn(
      `Event ${entry.id} (${entry.event}) failed in group "${this.group}" partition ${partition}, attempt ${attempt}; ` +
        `retrying in ${delay} ms: ${describe(error)}`,
    );
    if (await stop.sleep(delay)) return false;
    // Only the handlers that failed run again: the others already did their work.
    return this.attempt(entry, payload, failed, partition, stop, attempt + 1, firstFailedAt);
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

  private async runHandlers(
    handlers: readonly HandlerBinding[],
    message: EventrailMessage,
  ): Promise<{ failed: HandlerBinding[]; error: unknown }> {
    const failed: HandlerBinding[] = [];
    let error: unknown;
    for (const handler of handlers) {
      try {
        await handler.call(message);
      } catch (caught) {
        failed.push(handler);
        error = caught;
        this.logger.debug(`${handler.name} threw on event ${message.id} in group "${this.group}": ${describe(caught)}`);
      }
    }
    return { failed, error };
  }

  private giveUp(
    entry: RawEntry | MalformedEntry,
    partition: number,
    reason: 'retries-exhausted' | 'non-retryable' | 'malformed',
    error: unknown,
    attempts: number,
    firstFailedAt: Date,
    lastFailedAt = firstFailedAt,
  ): Promise<void> {
    return this.sink.accept({ group: this.group, partition, entry, reason, error, attempts, firstFailedAt, lastFailedAt });
  }
}

type Payload = ReturnType<typeof decodePayload>;

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
