import { InvalidOutboxTransactionError } from '../errors/invalid-outbox-transaction.error';
import { MissingPeerDependencyError } from '../../errors/missing-peer-dependency.error';
import { importOptionalPeer } from '../../util/optional-peer';
import type { OutboxConnector, RelaySession, Row } from './outbox-connector';
import type { PgPool } from './pg.connector';
import { nodePgSession, type NodePgClient } from './pg-session';
import { guardPoolClients } from './pool-guard';

/**
 * The part of a Kysely `Transaction` (or of a `Kysely` instance) the connector uses, written out so these
 * types need no `kysely` installed, and fit its ESM and CommonJS declarations alike (a real one fits it).
 */
export interface KyselyTransaction {
  /** True on the `Transaction` of `db.transaction().execute(...)`, false on the `Kysely` instance. */
  readonly isTransaction: boolean;
  /**
   * Runs a Kysely `CompiledQuery` (the connector passes `CompiledQuery.raw(sql, params)`). The parameter is
   * `never` because naming `CompiledQuery` would import kysely, and any narrower shape written here would
   * not accept Kysely's own `executeQuery`, whose parameter demands the real class.
   */
  executeQuery(query: never): Promise<{ rows: unknown[] }>;
}

/** The part of a `Kysely` instance the connector uses. */
export interface KyselyDatabase extends KyselyTransaction {
  transaction(): { execute<T>(callback: (trx: KyselyTransaction) => Promise<T>): Promise<T> };
  connection(): { execute<T>(callback: (db: KyselyTransaction) => Promise<T>): Promise<T> };
}

export interface KyselyConnectorOptions {
  /**
   * The `pg` `Pool` given to Kysely's `PostgresDialect`. Kysely does not expose
   * the driver's connection, so without it the relay holds a Kysely connection
   * and cannot `LISTEN`: it finds new rows by polling (`relay.pollIntervalMs`).
   */
  pool?: PgPool;
}

/**
 * The outbox on Kysely (`PostgresDialect`). The transaction handle is the
 * `Transaction` of `db.transaction().execute(...)`:
 *
 * ```ts
 * await db.transaction().execute(async (trx) => {
 *   await trx.insertInto('orders').values(order).execute();
 *   await outbox.publish(trx, 'order.placed', { orderId: order.id }, { key: order.customerId });
 * });
 * ```
 */
export function kyselyConnector(db: KyselyDatabase, options: KyselyConnectorOptions = {}): OutboxConnector<KyselyTransaction> {
  if (db === null || typeof db !== 'object' || typeof db.transaction !== 'function') {
    throw new InvalidOutboxTransactionError('kysely', 'a Kysely instance');
  }
  if (options.pool) guardPoolClients(options.pool);
  const run = async (on: KyselyTransaction, sql: string, params: readonly unknown[]): Promise<Row[]> => {
    const { CompiledQuery } = await importOptionalPeer(
      () => import('kysely'),
      (error) => new MissingPeerDependencyError('kysely', 'kyselyConnector', error),
    );
    // `as never`: see KyselyTransaction.executeQuery; this is the CompiledQuery Kysely's executeQuery takes.
    return (await on.executeQuery(CompiledQuery.raw(sql, [...params]) as never)).rows as Row[];
  };
  return {
    name: 'kysely',
    async execute(tx, sql, params) {
      if (tx?.isTransaction !== true) {
        throw new InvalidOutboxTransactionError('kysely', 'the Transaction of db.transaction().execute(...), not the Kysely instance');
      }
      return run(tx, sql, params);
    },
    transaction: (work) => db.transaction().execute(work),
    query: (sql, params = []) => run(db, sql, params),
    async session() {
      if (options.pool) {
        const client = await options.pool.connect();
        return nodePgSession(client as unknown as NodePgClient, () => client.release(true));
      }
      return heldConnection(db, run);
    },
  };
}

/**
 * A Kysely connection held until `close`: `db.connection().execute(fn)` keeps
 * one connection for as long as `fn` runs. Kysely then returns it to its pool,
 * so the relay unlocks before closing (a session lock must not stay behind).
 */
async function heldConnection(
  db: KyselyDatabase,
  run: (on: KyselyTransaction, sql: string, params: readonly unknown[]) => Promise<Row[]>,
): Promise<RelaySession> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let lost: ((error: Error) => void) | undefined;
  const connection = await new Promise<KyselyTransaction>((resolve, reject) => {
    db.connection()
      .execute(async (conn) => {
        resolve(conn);
        await released;
      })
      .catch((error: Error) => {
        reject(error);
        lost?.(error);
      });
  });
  return {
    query: (sql, params = []) => run(connection, sql, params),
    listen: () => Promise.resolve(false),
    onLost(onLost) {
      lost = onLost;
    },
    async close() {
      await run(connection, 'select pg_advisory_unlock_all()', []).catch(() => undefined);
      release();
    },
  };
}
