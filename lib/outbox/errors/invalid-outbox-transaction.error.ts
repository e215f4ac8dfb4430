import { EventrailError } from '../../errors/eventrail.error';

/**
 * The transaction handle given to `EventrailOutbox.publish` (or a connector) is not one the connector
 * can use: a pool instead of a client inside `BEGIN`, a data source instead of its `EntityManager`, ...
 */
export class InvalidOutboxTransactionError extends EventrailError {
  constructor(
    readonly connector: string,
    readonly reason: string,
  ) {
    super(`The ${connector} outbox connector needs ${reason}`);
  }
}
