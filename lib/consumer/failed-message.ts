import type { MalformedEntry, RawEntry } from '../log/codec';

/** Why a message was given up and dead-lettered. */
export type GiveUpReason = 'retries-exhausted' | 'non-retryable' | 'malformed' | 'max-deliveries';

/** A message the group gives up on: its handlers kept failing, failed for good, crashed the process too often, or it could not be decoded. */
export interface FailedMessage {
  group: string;
  partition: number;
  entry: RawEntry | MalformedEntry;
  reason: GiveUpReason;
  error: unknown;
  attempts: number;
  firstFailedAt: Date;
  lastFailedAt: Date;
}

/** Where given-up messages go before the offset moves past them. Throws when it could not keep the message. */
export interface FailedMessageSink {
  accept(failed: FailedMessage): Promise<void>;
}
