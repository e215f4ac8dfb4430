import { RedisUnavailableError } from './redis-unavailable.error';

/**
 * A publish got no answer from Redis within `publishTimeoutMs` (plus
 * `replication.timeoutMs` with `durability: 'replicated'`): a connection that
 * drops packets without a reset still looks connected, and would otherwise
 * hold the call until the path heals or the kernel gives up on it (minutes).
 * When `sent` is true the command had been written to the socket, so the
 * event(s) may or may not have been appended (and may still land if the path
 * heals): publish again with an explicit id and `dedupWindowMs` to append
 * once. When false, nothing was sent and nothing was appended. A subclass of
 * `RedisUnavailableError`, so code that catches that one catches this too.
 */
export class PublishTimeoutError extends RedisUnavailableError {
  constructor(
    /** The bound that passed, in ms. */
    readonly timeoutMs: number,
    /** How many events the call held. */
    readonly events: number,
    /** Whether the command(s) had been written to the connection. */
    readonly sent: boolean,
  ) {
    super(
      `no answer to a publish of ${events} event(s) within publishTimeoutMs (${timeoutMs} ms): ` +
        (sent
          ? 'it was sent, so the event(s) may or may not have been appended; publish again with an explicit id and dedupWindowMs to append once'
          : 'nothing was sent, nothing was appended'),
    );
  }
}
