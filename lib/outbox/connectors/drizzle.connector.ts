import { InvalidOutboxTransactionError } from '../errors/invalid-outbox-transaction.error';
import { MissingPeerDependencyError } from '../../errors/missing-peer-dependency.error';
import { importOptionalPeer } from '../../util/optional-peer';
import type { OutboxConnector, Row } from './outbox-connector';
import type { PgPool } from './pg.connector';
import { nodePgSession, type NodePgClient } from './pg-session';
import { guardPoolClients } from './pool-guard';

/**
 * The part of a Drizzle node-postgres transaction (`tx` of `db.transaction(...)`) the connector uses,
 * written out so these types need no `drizzle-orm` installed, and fit its ESM and CommonJS declarations
 * alike (a real one fits it).
 */
export interface DrizzleTransaction {
  /** Runs an `sql` template (the connector builds one with `sql` and `sql.param`). */
  execute(query: { getSQL(): unknown } | string): PromiseLike<{ rows: unknown[] }>;
  rollback(): unknown;
}

/** The part of what `drizzle(pool)` from `drizzle-orm/node-postgres` returns that the connector uses. */
export interface DrizzleDatabase {
  execute(query: { getSQL(): unknown } | string): PromiseLike<{ rows: unknown[] }>;
  transaction<T>(work: (tx: DrizzleTransaction) => Promise<T>): Promise<T>;
  /** The `pg` `Pool` given to `drizzle(pool)`, for the relay's own connection. */
  readonly $client: PgPool;
}

/**
 * The outbox on Drizzle over node-postgres (`drizzle(pool)`). The transaction
 * handle is the `tx` of `db.transaction(...)`:
 *
 * ```ts
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values(order);
 *   await outbox.publish(tx, 'order.placed', { orderId: order.id }, { key: order.customerId });
 * });
 * ```
 */
export function drizzleConnector(db: DrizzleDatabase): OutboxConnector<DrizzleTransaction> {
  if (db === null || typeof db !== 'object' || typeof db.transaction !== 'function') {
    throw new InvalidOutboxTransactionError('drizzle', 'a Drizzle database (drizzle(pool) from drizzle-orm/node-postgres)');
  }
  const pool = db.$client as PgPool | undefined;
  if (typeof pool?.connect !== 'function' || !('totalCount' in pool)) {
    throw new InvalidOutboxTransactionError('drizzle', 'a Drizzle database over a pg Pool (drizzle(pool)), for the relay connection');
  }
  guardPoolClients(pool);
  const run = async (on: Pick<DrizzleDatabase, 'execute'>, text: string, params: readonly unknown[]): Promise<Row[]> => {
    const { sql } = await importOptionalPeer(
      () => import('drizzle-orm'),
      (error) => new MissingPeerDependencyError('drizzle-orm', 'drizzleConnector', error),
    );
    // `$1, $2, ...` each once and in order become Drizzle parameters; sql.param keeps an array one parameter.
    const pieces = text.split(/\$\d+/);
    const strings = Object.assign([...pieces], { raw: [...pieces] }) as unknown as TemplateStringsArray;
    const result = await on.execute(sql(strings, ...params.map((value) => sql.param(value))));
    return result.rows as Row[];
  };
  return {
    poolMax: pool.options?.max,
    name: 'drizzle',
    async execute(tx, text, params) {
      if (typeof (tx as Partial<DrizzleTransaction> | null)?.rollback !== 'function') {
        throw new InvalidOutboxTransactionError('drizzle', 'the tx of db.transaction(...), not the database');
      }
      return run(tx, text, params);
    },
    transaction: (work) => db.transaction(work),
    query: (text, params = []) => run(db, text, params),
    async session() {
      const client = await pool.connect();
      return nodePgSession(client as unknown as NodePgClient, () => client.release(true));
    },
  };
}
