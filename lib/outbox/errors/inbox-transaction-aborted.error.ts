import { EventrailError } from '../../errors/eventrail.error';

/**
 * The inbox transaction did not commit although `work` resolved: a statement inside it failed and the
 * error was caught (PostgreSQL then answers `COMMIT` with `ROLLBACK`), or `work` ended the transaction
 * itself. Neither the effect nor the inbox row is in the database, so the message must be handled again.
 */
export class InboxTransactionAbortedError extends EventrailError {
  constructor(
    readonly group: string,
    readonly eventId: string,
    readonly reason: string,
    override readonly cause?: unknown,
  ) {
    super(`The inbox transaction of group "${group}" for event ${eventId} did not commit: ${reason}; nothing was written`);
  }
}
