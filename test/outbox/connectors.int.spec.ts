import { INestApplicationContext } from '@nestjs/common';
import { drizzle } from 'drizzle-orm/node-postgres';
import Redis from 'ioredis';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { Pool } from 'pg';
import { DataSource } from 'typeorm';
import {
  drizzleConnector,
  EventrailInbox,
  EventrailOutbox,
  EventrailOutboxRelay,
  InboxTransactionAbortedError,
  InvalidOutboxTransactionError,
  kyselyConnector,
  OutboxConnector,
  pgConnector,
  typeormConnector,
} from '../../lib/outbox';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, logEntries, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';

/**
 * Each connector against real PostgreSQL, with the library's own transaction
 * API: a publish commits with the transaction and vanishes with a rollback, the
 * inbox runs work once per (group, event id), and the relay drains through the
 * connector's session.
 */
interface Library {
  connector: OutboxConnector<unknown>;
  /** Runs `work` in a transaction of the library; `insertOrder` writes app state through `tx`. */
  transaction<T>(work: (tx: unknown) => Promise<T>): Promise<T>;
  insertOrder(tx: unknown, customer: string): Promise<void>;
  /** Runs raw SQL through `tx`, as the app's own code would. */
  run(tx: unknown, text: string): Promise<Array<Record<string, unknown>>>;
  /** The non-transaction handle a user might pass by mistake. */
  notATransaction: unknown;
  close(): Promise<void>;
}

class Rollback extends Error {}

describe('outbox connectors', () => {
  let server: PostgresServer;
  let url: string;
  let redis: Redis;
  let pool: Pool;

  const libraries: Record<string, () => Promise<Library>> = {
    pg: async () => {
      const own = new Pool({ connectionString: url });
      return {
        connector: pgConnector(own) as OutboxConnector<unknown>,
        transaction: (work) => (pgConnector(own) as OutboxConnector<unknown>).transaction(work),
        insertOrder: async (tx, customer) =>
          void (await (tx as import('pg').PoolClient).query('insert into orders (customer) values ($1)', [customer])),
        run: async (tx, text) => (await (tx as import('pg').PoolClient).query(text)).rows,
        notATransaction: own,
        close: () => own.end(),
      };
    },
    typeorm: async () => {
      const dataSource = await new DataSource({ type: 'postgres', url, entities: [] }).initialize();
      return {
        connector: typeormConnector(dataSource) as OutboxConnector<unknown>,
        transaction: (work) => dataSource.transaction(work),
        insertOrder: async (tx, customer) =>
          void (await (tx as import('typeorm').EntityManager).query('insert into orders (customer) values ($1)', [customer])),
        run: async (tx, text) => (await (tx as import('typeorm').EntityManager).query(text)) as Array<Record<string, unknown>>,
        notATransaction: dataSource.manager,
        close: () => dataSource.destroy(),
      };
    },
    kysely: async () => {
      const own = new Pool({ connectionString: url });
      const db = new Kysely<{ orders: { customer: string } }>({ dialect: new PostgresDialect({ pool: own }) });
      return {
        connector: kyselyConnector(db, { pool: own }) as OutboxConnector<unknown>,
        transaction: (work) => db.transaction().execute(work),
        insertOrder: async (tx, customer) => void (await (tx as typeof db).insertInto('orders').values({ customer }).execute()),
        run: async (tx, text) => (await sql.raw<Record<string, unknown>>(text).execute(tx as typeof db)).rows,
        notATransaction: db,
        close: () => db.destroy(),
      };
    },
    'kysely without a pool (polling)': async () => {
      const own = new Pool({ connectionString: url });
      const db = new Kysely<{ orders: { customer: string } }>({ dialect: new PostgresDialect({ pool: own }) });
      return {
        connector: kyselyConnector(db) as OutboxConnector<unknown>,
        transaction: (work) => db.transaction().execute(work),
        insertOrder: async (tx, customer) => void (await sql`insert into orders (customer) values (${customer})`.execute(tx as typeof db)),
        run: async (tx, text) => (await sql.raw<Record<string, unknown>>(text).execute(tx as typeof db)).rows,
        notATransaction: db,
        close: () => db.destroy(),
      };
    },
    drizzle: async () => {
      const own = new Pool({ connectionString: url });
      const db = drizzle(own);
      return {
        connector: drizzleConnector(db) as OutboxConnector<unknown>,
        transaction: (work) => db.transaction(work),
        insertOrder: async (tx, customer) => void (await (tx as typeof db).execute(`insert into orders (customer) values ('${customer}')`)),
        run: async (tx, text) => (await (tx as typeof db).execute(text)).rows,
        notATransaction: db,
        close: () => own.end(),
      };
    },
  };

  beforeAll(async () => {
    server = await startPostgres();
    url = await server.createDatabase();
    pool = new Pool({ connectionString: url });
    await pool.query('create table orders (id serial primary key, customer text not null)');
    redis = new Redis(testRedisUrl());
  });
  afterAll(async () => {
    await pool?.end();
    redis?.disconnect();
    await server?.stop();
  });

  describe.each(Object.keys(libraries))('%s', (name) => {
    let library: Library;
    let app: INestApplicationContext;
    let prefix: string;
    let tables: ReturnType<typeof uniqueTables>;
    const count = async (table: string, where = 'true'): Promise<number> =>
      Number((await library.connector.query(`select count(*) as n from ${table} where ${where}`, []))[0].n);

    beforeEach(async () => {
      library = await libraries[name]();
      prefix = uniquePrefix('conn');
      tables = uniqueTables();
      app = await createOutboxApp(
        { prefix, autoStart: false },
        { connector: library.connector, ...tables, relay: { enabled: false }, inbox: { pruneIntervalMs: 0 } },
      );
    });
    afterEach(async () => {
      await app?.close();
      await library?.close();
      await deletePrefix(redis, prefix);
    });

    it('publishes in the transaction, and a rollback leaves no row', async () => {
      const outbox = app.get(EventrailOutbox);
      const customer = `${name}-commit`;
      const record = await library.transaction(async (tx) => {
        await library.insertOrder(tx, customer);
        return outbox.publish(tx, 'order.placed', { customer }, { key: customer });
      });
      await expect(
        library.transaction(async (tx) => {
          await library.insertOrder(tx, `${name}-rollback`);
          await outbox.publishMany(tx, [{ event: 'order.placed', data: { n: 1 }, key: 'r' }]);
          throw new Rollback();
        }),
      ).rejects.toThrow(Rollback);
      const rows = await library.connector.query(`select event_id, key from ${tables.outboxTable}`, []);
      expect(rows).toEqual([{ event_id: record.id, key: customer }]);
      expect(await count('orders', `customer = '${name}-rollback'`)).toBe(0);
      await expect(outbox.publish(library.notATransaction, 'order.placed', {})).rejects.toThrow(InvalidOutboxTransactionError);
    });

    it('runs inbox work once per group and event id, and rolls both back when it fails', async () => {
      const inbox = app.get(EventrailInbox);
      const message = { group: 'billing', id: `evt-${name}` };
      const customer = `${name}-inbox`;
      await expect(
        inbox.handle(message, async (tx) => {
          await library.insertOrder(tx, customer);
          throw new Error('work failed');
        }),
      ).rejects.toThrow('work failed');
      expect(await count(tables.inboxTable)).toBe(0);
      expect(await count('orders', `customer = '${customer}'`)).toBe(0);
      const first = await inbox.handle(message, async (tx) => {
        await library.insertOrder(tx, customer);
        return 'done';
      });
      const again = await inbox.handle(message, async (tx) => library.insertOrder(tx, customer));
      const otherGroup = await inbox.handle({ ...message, group: 'audit' }, async () => 'audited');
      expect([first, again, otherGroup]).toEqual([
        { duplicate: false, result: 'done' },
        { duplicate: true },
        { duplicate: false, result: 'audited' },
      ]);
      expect(await count('orders', `customer = '${customer}'`)).toBe(1);
      expect(inbox.stats()).toEqual({ handled: 2, skippedDuplicates: 1 });
    });

    it('fails the inbox handle when work left the transaction aborted, and commits nothing', async () => {
      const inbox = app.get(EventrailInbox);
      const customer = `${name}-aborted`;
      // A work that swallows a SQL error: PostgreSQL then answers COMMIT with ROLLBACK, without raising.
      const handled = inbox.handle({ group: 'billing', id: `evt-aborted-${name}` }, async (tx) => {
        await library.insertOrder(tx, customer);
        await library.run(tx, 'select 1 / 0').catch(() => undefined);
        return 'done';
      });
      await expect(handled).rejects.toThrow(InboxTransactionAbortedError);
      expect(await count(tables.inboxTable)).toBe(0);
      expect(await count('orders', `customer = '${customer}'`)).toBe(0);
      expect(inbox.stats()).toEqual({ handled: 0, skippedDuplicates: 0 });
    });

    // Kysely does not expose its driver's clients: only with `pool` can the connector keep a lost connection from ending the process.
    const withClients = name === 'kysely without a pool (polling)' ? it.skip : it;
    withClients('fails one inbox handle when its connection is terminated mid-transaction, and the next one succeeds', async () => {
      const inbox = app.get(EventrailInbox);
      const customer = `${name}-terminated`;
      const handled = inbox.handle({ group: 'billing', id: `evt-terminated-${name}` }, async (tx) => {
        await library.insertOrder(tx, customer);
        const [{ pid }] = await library.run(tx, 'select pg_backend_pid() as pid');
        // What a restart or a failover does to a connection that sits idle inside a transaction.
        await pool.query('select pg_terminate_backend($1)', [pid]);
        await waitFor(
          async () => (await pool.query('select 1 from pg_stat_activity where pid = $1', [pid])).rowCount === 0,
          'the backend is gone',
        );
        await library.insertOrder(tx, customer);
      });
      await expect(handled).rejects.toThrow();
      expect(await count('orders', `customer = '${customer}'`)).toBe(0);
      const next = await inbox.handle({ group: 'billing', id: `evt-after-${name}` }, async (tx) => library.insertOrder(tx, customer));
      expect(next).toEqual({ duplicate: false, result: undefined });
      expect(await count('orders', `customer = '${customer}'`)).toBe(1);
    });

    it('relays through the connector session', async () => {
      const relayApp = await createOutboxApp(
        { prefix, autoStart: false },
        { connector: library.connector, ...tables, relay: { enabled: true, pollIntervalMs: 100 }, inbox: { pruneIntervalMs: 0 } },
      );
      try {
        const outbox = app.get(EventrailOutbox);
        await library.transaction((tx) =>
          outbox.publishMany(
            tx,
            [1, 2, 3].map((n) => ({ event: 'a', data: { n }, key: 'k' })),
          ),
        );
        await waitFor(async () => (await count(tables.outboxTable)) === 0, 'the relay drained the table');
        expect((await logEntries(redis, prefix)).map((e) => (e.data as { n: number }).n)).toEqual([1, 2, 3]);
        expect(relayApp.get(EventrailOutboxRelay).stats()).toMatchObject({ active: true, relayed: 3 });
      } finally {
        await relayApp.close();
      }
      // The relay's session lock went with it: nobody holds it any more.
      expect(await count('pg_locks', `locktype = 'advisory' and granted`)).toBe(0);
    });
  });
});
