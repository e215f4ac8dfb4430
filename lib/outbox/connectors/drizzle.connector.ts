import type { Pool } from 'pg';
import type { NodePgDatabase, NodePgTransaction } from 'drizzle-orm/node-postgres';
import { InvalidOutboxTransactionError } from '../errors/invalid-outbox-transaction.error';
import { MissingPeerDependencyError } from '../../errors/missing-peer-dependency.error';
import { importOptionalPeer } from '../../util/optional-peer';
import type { OutboxConnector, Row } from './outbox-connector';
import { nodePgSession, type NodePgClient } from './pg-session';
import { guardPoolClients } from './pool-guard';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any schema: the outbox writes raw SQL
type AnySchema = Record<string, any>;
type Executor = Pick<NodePgDatabase<AnySchema>, 'execute'>;

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
export function drizzleConnector<S extends AnySchema>(
  db: NodePgDatabase<S> & { $client: Pool },
): OutboxConnector<NodePgTransaction<S, never>> {
  if (db === null || typeof db !== 'object' || typeof db.transaction !== 'function') {
    throw new InvalidOutboxTransactionError('drizzle', 'a Drizzle database (drizzle(pool) from drizzle-orm/node-postgres)');
  }
  const pool = db.$client;
  if (typeof pool?.connect !== 'function' || !('totalCount' in pool)) {
    throw new InvalidOutboxTransactionError('drizzle', 'a Drizzle database over a pg Pool (drizzle(pool)), for the relay connection');
  }
  guardPoolClients(pool);
  const run = async (on: Executor, text: string, params: readonly unknown[]): Promise<Row[]> => {
    const { sql } = await importOptionalPeer(
      () => import('drizzle-orm'),
      (error) => new MissingPeerDependencyError('drizzle-orm', 'drizzleConnector', error),
    );
    // `$1, $2, ...` each once and in order become Drizzle parameters; sql.param keeps an array one parameter.
    const pieces = text.split(/\$\d+/);
    const strings = Object.assign([...pieces], { raw: [...pieces] }) as unknown as TemplateStringsArray;
    // `as never`: the dynamic import sees drizzle's ESM typings, the signature above its CommonJS ones (the same class at run time).
    const result = await on.execute(sql(strings, ...params.map((value) => sql.param(value))) as never);
    return result.rows as Row[];
  };
  return {
    poolMax: (pool as { options?: { max?: number } }).options?.max,
    name: 'drizzle',
    async execute(tx, text, params) {
      if (typeof (tx as { rollback?: unknown } | null)?.rollback !== 'function') {
        throw new InvalidOutboxTransactionError('drizzle', 'the tx of db.transaction(...), not the database');
      }
      return run(tx as unknown as Executor, text, params);
    },
    transaction: (work) => db.transaction((tx) => work(tx as unknown as NodePgTransaction<S, never>)),
    query: (text, params = []) => run(db, text, params),
    async session() {
      const client = await pool.connect();
      return nodePgSession(client as unknown as NodePgClient, () => client.release(true));
    },
  };
}
