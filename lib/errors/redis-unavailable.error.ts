import { EventrailError } from './eventrail.error';

/**
 * Redis did not answer: at startup within `startupTimeoutMs`, or for a
 * publish. A publish refused before sending (no connection) appended nothing;
 * one that failed after it was sent may or may not have been appended, so
 * retry it with an explicit id and `dedupWindowMs` to append it once.
 */
export class RedisUnavailableError extends EventrailError {
  constructor(
    readonly operation: string,
    override readonly cause?: unknown,
  ) {
    super(`Redis is unavailable: ${operation}${hasMessage(cause) ? ` (${cause.message})` : ''}`);
  }
}

/** An `Error` or anything shaped like one: a socket error from another realm (a test sandbox) fails `instanceof Error`. */
function hasMessage(cause: unknown): cause is { message: string } {
  return typeof (cause as { message?: unknown } | null)?.message === 'string';
}
