import { EventrailError } from '../../errors/eventrail.error';

/**
 * `EventrailClient.close()` was called while `connect()` (or the first
 * `emit`, which connects) still waited for Redis: that connect gives up and
 * fails with this error instead of opening a connection for a closed client.
 */
export class ClientClosedError extends EventrailError {
  constructor() {
    super('EventrailClient was closed while connecting to Redis; nothing was published');
  }
}
