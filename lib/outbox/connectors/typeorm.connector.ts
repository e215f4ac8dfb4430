import { InvalidOutboxTransactionError } from '../errors/invalid-outbox-transaction.error';
import type { OutboxConnector, Row } from './outbox-connector';
import { nodePgSession, type NodePgClient } from './pg-session';
import { guardPoolClients, type ClientEvents } from './pool-guard';

/** What TypeORM's postgres driver offers for a connection of one's own (public on `PostgresDriver`). */
interface PostgresDriverConnections {
  obtainMasterConnection(): Promise<[NodePgClient, (error?: unknown) => void]>;
  /** The driver's pg `Pool` (once the DataSource is initialized). */
  master?: ClientEvents;
}

/**
 * The part of a TypeORM `EntityManager` the connector uses, written out so these types need no `typeorm`
 * installed, and fit its ESM and CommonJS declarations alike (a real one fits it).
 */
export interface TypeormEntityManager {
  query(query: string, parameters?: unknown[]): Promise<unknown>;
  /** Set on the manager of `dataSource.transaction(...)`; its `isTransactionActive` is what the connector checks. */
  readonly queryRunner?: { readonly isTransactionActive: boolean };
}

/** The part of a TypeORM `DataSource` the connector uses. */
export interface TypeormDataSource {
  readonly options: { readonly type: string };
  /** The postgres driver, whose pool the relay takes its own connection from. */
  readonly driver: object;
  query(query: string, parameters?: unknown[]): Promise<unknown>;
  transaction<T>(work: (manager: TypeormEntityManager) => Promise<T>): Promise<T>;
}

/**
 * The outbox on a TypeORM `DataSource` of type `postgres`. The transaction
 * handle is the `EntityManager` of `dataSource.transaction(...)`:
 *
 * ```ts
 * await dataSource.transaction(async (manager) => {
 *   await manager.save(order);
 *   await outbox.publish(manager, 'order.placed', { orderId: order.id }, { key: order.customerId });
 * });
 * ```
 */
export function typeormConnector(dataSource: TypeormDataSource): OutboxConnector<TypeormEntityManager> {
  if (dataSource === null || typeof dataSource !== 'object' || typeof dataSource.transaction !== 'function') {
    throw new InvalidOutboxTransactionError('typeorm', 'a TypeORM DataSource');
  }
  if (dataSource.options.type !== 'postgres') {
    throw new InvalidOutboxTransactionError('typeorm', `a DataSource of type postgres, not ${String(dataSource.options.type)}`);
  }
  const { master } = dataSource.driver as unknown as PostgresDriverConnections;
  if (typeof master?.on === 'function') guardPoolClients(master);
  return {
    name: 'typeorm',
    async execute(tx, sql, params) {
      if (!tx?.queryRunner?.isTransactionActive) {
        throw new InvalidOutboxTransactionError(
          'typeorm',
          'the EntityManager of dataSource.transaction(...) (this one is not in a transaction)',
        );
      }
      return (await tx.query(sql, [...params])) as Row[];
    },
    transaction: (work) => dataSource.transaction(work),
    async query(sql, params = []) {
      return (await dataSource.query(sql, [...params])) as Row[];
    },
    async session() {
      const driver = dataSource.driver as unknown as PostgresDriverConnections;
      const [client, release] = await driver.obtainMasterConnection();
      // Released with an error, the pool discards the connection instead of reusing it.
      return nodePgSession(client, () => release(new Error('outbox relay session closed')));
    },
  };
}
