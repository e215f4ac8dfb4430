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

  async process(entry: RawEntry | MalformedEntry, partition: number, stop: StopSignal): Promise<boolean> {
    if (isMalformed(entry)) {
      await this.giveUp(entry, partition, 'malformed', new DecodeError(entry.reason), 0, new Date());
      return true;
    }
    let handlers = this.handlers.get(entry.event);
    if (!handlers) return true;
    let payload: ReturnType<typeof decodePayload>;
    try {
      payload = decodePayload(entry);
    } catch (error) {
      await this.giveUp(entry, partition, 'malformed', error, 0, new Date());
      return true;
    }

    let firstFailedAt: Date | undefined;
    for (let attempt = 1; ; attempt++) {
      const message: EventrailMessage = {
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
      const { failed, error } = await this.runHandlers(handlers, message);
      if (failed.length === 0) return true;

      const now = new Date();
      firstFailedAt ??= now;
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
      handlers = failed;
    }
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

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
