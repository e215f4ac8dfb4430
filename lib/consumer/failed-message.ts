import type { MalformedEntry, RawEntry } from '../log/codec';

/** A message the group gives up on: its handlers kept failing, failed for good, or it could not be decoded. */
export interface FailedMessage {
  group: string;
  partition: number;
  entry: RawEntry | MalformedEntry;
  reason: 'retries-exhausted' | 'non-retryable' | 'malformed';
  error: unknown;
  attempts: number;
  firstFailedAt: Date;
  lastFailedAt: Date;
}

/**
 * Where given-up messages go before the offset moves past them. The seam for
 * the dead-letter stream; until it exists they are logged and skipped.
 */
export interface FailedMessageSink {
  accept(failed: FailedMessage): Promise<void>;
}
