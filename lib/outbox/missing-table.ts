import { OutboxSchemaMissingError } from './errors/outbox-schema-missing.error';

/** PostgreSQL's `undefined_table`. */
const UNDEFINED_TABLE = '42P01';

/**
 * Throws `OutboxSchemaMissingError` for a "relation does not exist" error,
 * and `error` itself otherwise. Libraries wrap the driver's error (TypeORM's
 * `driverError`, Drizzle's `cause`), so the code is looked for there too.
 */
export function rethrowMissingTable(error: unknown, table: string): never {
  if (sqlState(error) === UNDEFINED_TABLE) throw new OutboxSchemaMissingError(table, error);
  throw error;
}

export function sqlState(error: unknown): string | undefined {
  for (let e = error, depth = 0; e !== null && typeof e === 'object' && depth < 4; depth++) {
    const { code, driverError, cause } = e as { code?: unknown; driverError?: unknown; cause?: unknown };
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
    e = driverError ?? cause;
  }
  return undefined;
}
