import { InvalidOutboxTransactionError } from '../errors/invalid-outbox-transaction.error';
import type { OutboxConnector, Row } from './outbox-connector';
import { nodePgSession, type NodePgClient } from './pg-session';
import { guardPoolClients, type ErrorEmitter } from './pool-guard';

/**
 * The part of a `pg` `PoolClient` the connector uses, written out so these types need no `pg` installed
 * (a real `PoolClient` fits it).
 */
export interface PgPoolClient extends ErrorEmitter {
  query(text: string, values?: unknown[]): Promise<{ rows: Row[] }>;
  release(error?: Error | boolean): void;
  /** `I` idle, `T` in a transaction, `E` in an aborted one (pg 8.16 and later). */
  getTransactionStatus?(): string | null;
}

/** The part of a `pg` `Pool` the connector uses. */
export interface PgPool {
  readonly totalCount: number;
  /** `max`: the pool's size (pg sets it, 10 by default). */
  readonly options?: { readonly max?: number };
  connect(): Promise<PgPoolClient>;
  query(text: string, values?: unknown[]): Promise<{ rows: Row[] }>;
  on(event: 'acquire', listener: (client: PgPoolClient) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
}

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
export function pgConnector(pool: PgPool): OutboxConnector<PgPoolClient> {
  if (!isPool(pool)) throw new InvalidOutboxTransactionError('pg', 'a pg Pool (new Pool({ connectionString }))');
  guardPoolClients(pool);
  return {
    name: 'pg',
    poolMax: pool.options?.max,
    async execute(tx, sql, params) {
      if (isPool(tx) || typeof (tx as Partial<PgPoolClient> | null)?.query !== 'function') {
        throw new InvalidOutboxTransactionError('pg', 'the PoolClient inside BEGIN, not the Pool (a pool query commits at once)');
      }
      await checkInTransaction(tx);
      return (await tx.query(sql, [...params])).rows;
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
      return (await pool.query(sql, [...params])).rows;
    },
    async session() {
      const client = await pool.connect();
      return nodePgSession(client as unknown as NodePgClient, () => client.release(true));
    },
  };
}

/**
 * A client outside `BEGIN` would autocommit the insert (a later rollback of the app's work leaves a
 * phantom event); an aborted one (`E`) is left to PostgreSQL, whose refusal (SQL state 25P02) the inbox
 * recognises. pg reports the state the server sent with its last ReadyForQuery; older versions are asked in SQL (inside a
 * transaction block, its start is earlier than the statement's).
 */
async function checkInTransaction(tx: PgPoolClient): Promise<void> {
  let status = typeof tx.getTransactionStatus === 'function' ? tx.getTransactionStatus() : undefined;
  if (status === undefined || status === null) {
    const [row] = (await tx.query('select transaction_timestamp() < statement_timestamp() as in_block')).rows;
    status = row?.in_block === true ? 'T' : 'I';
  }
  if (status === 'I') {
    throw new InvalidOutboxTransactionError(
      'pg',
      'a PoolClient inside BEGIN (this one is not in a transaction: the insert would commit at once)',
    );
  }
}

function isPool(value: unknown): value is PgPool {
  return value !== null && typeof value === 'object' && 'totalCount' in value && typeof (value as PgPool).connect === 'function';
}
