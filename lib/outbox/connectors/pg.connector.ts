import type { Pool, PoolClient } from 'pg';
import { InvalidOutboxTransactionError } from '../errors/invalid-outbox-transaction.error';
import type { OutboxConnector, Row } from './outbox-connector';
import { nodePgSession, type NodePgClient } from './pg-session';

/**
 * The outbox on a `pg` `Pool`. The transaction handle is a `PoolClient` on
 * which the app sent `BEGIN`:
 *
 * ```ts
 * const client = await pool.connect();
 * await client.query('begin');
 * await client.query('insert into orders ...');
 * await outbox.publish(client, 'order.placed', { orderId });
 * await client.query('commit');
 * ```
 */
export function pgConnector(pool: Pool): OutboxConnector<PoolClient> {
  if (!isPool(pool)) throw new InvalidOutboxTransactionError('pg', 'a pg Pool (new Pool({ connectionString }))');
  return {
    name: 'pg',
    async execute(tx, sql, params) {
      if (isPool(tx) || typeof (tx as Partial<PoolClient> | null)?.query !== 'function') {
        throw new InvalidOutboxTransactionError('pg', 'the PoolClient inside BEGIN, not the Pool (a pool query commits at once)');
      }
      return (await tx.query(sql, [...params])).rows as Row[];
    },
    async transaction(work) {
      const client = await pool.connect();
      let broken: Error | undefined;
      try {
        await client.query('begin');
        const result = await work(client);
        await client.query('commit');
        return result;
      } catch (error) {
        await client.query('rollback').catch((rollbackError: Error) => (broken = rollbackError));
        throw error;
      } finally {
        client.release(broken);
      }
    },
    async query(sql, params = []) {
      return (await pool.query(sql, [...params])).rows as Row[];
    },
    async session() {
      const client = await pool.connect();
      return nodePgSession(client as unknown as NodePgClient, () => client.release(true));
    },
  };
}

function isPool(value: unknown): value is Pool {
  return value !== null && typeof value === 'object' && 'totalCount' in value && typeof (value as Pool).connect === 'function';
}
