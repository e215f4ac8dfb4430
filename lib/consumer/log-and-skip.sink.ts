import { Logger } from '@nestjs/common';
import type { FailedMessage, FailedMessageSink } from './failed-message';

/** Logs a given-up message with everything needed to find it in the log, then lets the group move on. */
export class LogAndSkipSink implements FailedMessageSink {
  private readonly logger = new Logger(LogAndSkipSink.name);

  accept(failed: FailedMessage): Promise<void> {
    const { entry } = failed;
    const id = 'id' in entry ? entry.id : entry.offset;
    const event = 'event' in entry ? entry.event : '(malformed)';
    const error = failed.error instanceof Error ? failed.error : new Error(String(failed.error));
    this.logger.error(
      `Skipping event ${id} (${event}) at ${entry.offset} in group "${failed.group}" partition ${failed.partition} ` +
        `after ${failed.attempts} attempt(s), ${failed.reason}: ${error.message}`,
      error.stack,
    );
    return Promise.resolve();
  }
}
