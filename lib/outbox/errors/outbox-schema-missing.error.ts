import { EventrailError } from '../../errors/eventrail.error';

/** The outbox or inbox table does not exist in the database: the schema was never created. */
export class OutboxSchemaMissingError extends EventrailError {
  constructor(
    readonly table: string,
    override readonly cause?: unknown,
  ) {
    super(`Table ${table} does not exist: run "eventrail outbox migrate --database-url <url>" or set ensureSchema: true`);
  }
}
