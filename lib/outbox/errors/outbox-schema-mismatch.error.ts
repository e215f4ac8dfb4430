import { EventrailError } from '../../errors/eventrail.error';

/** An outbox or inbox table exists but not in the shape the outbox needs; `differences` says what differs. */
export class OutboxSchemaMismatchError extends EventrailError {
  constructor(
    readonly table: string,
    readonly differences: string[],
  ) {
    super(
      `Table ${table} does not have the shape the outbox needs: ${differences.join('; ')}. ` +
        `Run "eventrail outbox migrate --database-url <url>" (or set ensureSchema: true) to add what is missing; ` +
        `a column or key of another type or an extra required column must be fixed by hand, or pick another table name`,
    );
  }
}
