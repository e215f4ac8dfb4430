import { Logger } from '@nestjs/common';
import { isMalformed } from '../../wire/codec';
import { escapeControls } from '../../util/control-chars';
import { describeThrown } from '../../util/describe-error';
import { logRecord } from '../../util/log-record';
import { encodeDeadLetter } from '../../wire/dead-letter.codec';
import type { MetricsHooks } from '../../metrics/eventrail-metrics';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import type { FailedMessage, FailedMessageSink } from './failed-message';

/**
 * Appends a given-up message to its group's dead-letter stream, with the
 * original entry and why it failed. If the append fails the message is not
 * done, so the partition stops at it rather than lose it.
 */
export class DeadLetterSink implements FailedMessageSink {
  private readonly logger = new Logger(DeadLetterSink.name);

  constructor(
    private readonly redis: EventrailRedis,
    private readonly workerId: string,
    private readonly metrics: MetricsHooks,
  ) {}

  async accept(failed: FailedMessage): Promise<void> {
    const { entry } = failed;
    const fields = encodeDeadLetter(failed, this.workerId);
    const letterId = (await this.redis.client.xadd(this.redis.keys.deadLetters(failed.group), '*', ...fields)) as string;
    this.metrics.emit('onMessageDeadLettered', failed.group, isMalformed(entry) ? '(malformed)' : entry.event, entry.offset, letterId);
    const id = isMalformed(entry) ? entry.offset : `${entry.id} (${entry.event})`;
    const { message } = describeThrown(failed.error);
    // Ids, event names and error messages can come from producers: logged inert.
    const msg = escapeControls(
      `Dead-lettered event ${id} at ${entry.offset} in group "${failed.group}" partition ${failed.partition} ` +
        `after ${failed.attempts} attempt(s), ${failed.reason}: ${message}`,
    );
    this.logger.error(
      logRecord(msg, {
        group: failed.group,
        partition: failed.partition,
        eventId: isMalformed(entry) ? undefined : entry.id,
        event: isMalformed(entry) ? undefined : entry.event,
        offset: entry.offset,
        reason: failed.reason,
        attempts: failed.attempts,
        deadLetterId: letterId,
      }),
    );
  }
}
