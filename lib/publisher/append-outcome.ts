import { InvalidEventDataError } from '../errors/invalid-event-data.error';
import { PayloadTooLargeError } from '../errors/payload-too-large.error';
import type { PublishOutcome } from '../errors/publish-many.error';

/**
 * An append Redis answered and did not make: a script's own report of the
 * command that failed, or a run its guard held back. Known not appended.
 */
export class AppendRefused extends Error {
  /** Held back by the run guard because an earlier run of its partition was not appended; not the cause itself. */
  readonly heldBack: boolean;
  constructor(reply: string) {
    super(reply);
    this.heldBack = reply.startsWith('GUARDED');
  }
}

/**
 * What an append's error says of it: an error reply from Redis (an XADD it
 * refused, a script that stopped before its first write) or a script's own
 * report means not appended, and so does data refused as it was serialised
 * (a `publishMany` event whose getter answered differently the second time:
 * it and the events after it were not sent); anything else (a dropped
 * connection, no reply) means it was sent and may or may not have been.
 */
export function outcomeOf(error: Error): PublishOutcome {
  if (error instanceof AppendRefused || error.name === 'ReplyError') return 'not-appended';
  return error instanceof InvalidEventDataError || error instanceof PayloadTooLargeError ? 'not-appended' : 'unknown';
}
