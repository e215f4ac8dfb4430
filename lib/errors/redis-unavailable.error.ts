import { EventrailError } from './eventrail.error';

/**
 * Redis did not answer: at startup within `startupTimeoutMs`, or for a publish
 * (the event was not appended).
 */
export class RedisUnavailableError extends EventrailError {
  constructor(
    readonly operation: string,
    override readonly cause?: unknown,
  ) {
    super(`Redis is unavailable: ${operation}${cause instanceof Error ? ` (${cause.message})` : ''}`);
  }
}
