import { InvalidOutboxTransactionError } from '../errors/invalid-outbox-transaction.error';
import type { OutboxConnector, RelaySession, Row } from './outbox-connector';

/**
 * The part of a PGlite transaction (`tx` of `db.transaction(...)`) the connector uses, written out so
 * these types need no `@electric-sql/pglite` installed, and fit its ESM and CommonJS declarations alike.
 */
export interface PgliteTransaction {
  query<T>(query: string, params?: unknown[]): Promise<{ rows: T[] }>;
  rollback(): Promise<void>;
  readonly closed: boolean;
}

/** The part of a `PGlite` instance the connector uses. */
export interface PgliteDatabase {
  query<T>(query: string, params?: unknown[]): Promise<{ rows: T[] }>;
  exec(query: string): Promise<Array<{ rows: unknown[] }>>;
  transaction<T>(callback: (tx: PgliteTransaction) => Promise<T>): Promise<T>;
  listen(channel: string, callback: (payload: string) => void): Promise<() => Promise<void>>;
  readonly closed: boolean;
}

/**
 * The outbox on an embedded PGlite database (`@electric-sql/pglite`, PostgreSQL
 * in WebAssembly): for development, tests and single-process apps. The
 * transaction handle is the `tx` of `db.transaction(...)`.
 *
 * PGlite is one session shared by the whole process and runs one transaction
 * at a time (its `query` waits while a transaction is open), so the relay's
 * "session" is that same session: its advisory lock is uncontended within the
 * process, which is all one embedded database can have.
 */
export function pgliteConnector(db: PgliteDatabase): OutboxConnector<PgliteTransaction> {
  if (db === null || typeof db !== 'object' || typeof db.transaction !== 'function' || typeof db.listen !== 'function') {
    throw new InvalidOutboxTransactionError('pglite', 'a PGlite instance (new PGlite() from @electric-sql/pglite)');
  }
  const query = async (sql: string, params: readonly unknown[] = []): Promise<Row[]> => {
    // Without parameters it may be a script of several statements (the schema), which only exec runs.
    if (params.length === 0) return ((await db.exec(sql)).at(-1)?.rows ?? []) as Row[];
    return (await db.query<Row>(sql, [...params])).rows;
  };
  return {
    name: 'pglite',
    async execute(tx, sql, params) {
      if (typeof (tx as Partial<PgliteTransaction> | null)?.rollback !== 'function' || !('closed' in (tx as object))) {
        throw new InvalidOutboxTransactionError('pglite', 'the tx of db.transaction(...), not the PGlite instance');
      }
      return (await tx.query<Row>(sql, [...params])).rows;
    },
    transaction: (work) => db.transaction(work),
    query,
    session: () => Promise.resolve(sharedSession(db, query)),
  };
}

function sharedSession(db: PgliteDatabase, query: (sql: string, params?: readonly unknown[]) => Promise<Row[]>): RelaySession {
  const unlisten: Array<() => Promise<void>> = [];
  return {
    query,
    async listen(channel, onNotify) {
      unlisten.push(await db.listen(channel, () => onNotify()));
      return true;
    },
    onLost: () => undefined,
    async close() {
      for (const stop of unlisten.splice(0)) await stop().catch(() => undefined);
      if (!db.closed) await query('select pg_advisory_unlock_all()').catch(() => undefined);
    },
  };
}
