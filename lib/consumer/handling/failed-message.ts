import type { DeadLetterRecord } from '../../wire/dead-letter.codec';

/**
 * A message the group gives up on: its handlers kept failing, failed for
 * good, crashed the process too often, or it could not be decoded. It is
 * recorded as its dead letter will be.
 */
export type FailedMessage = DeadLetterRecord;

/** Where given-up messages go before the offset moves past them. Throws when it could not keep the message. */
export interface FailedMessageSink {
  accept(failed: FailedMessage): Promise<void>;
}
