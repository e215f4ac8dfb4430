import { INestApplicationContext } from '@nestjs/common';
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import Redis from 'ioredis';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { drizzleConnector, EventrailInbox, kyselyConnector, OutboxConnector, pgConnector, typeormConnector } from '../../lib/outbox';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';

/** A connector over an app's own pool, and how the app writes through its transaction handle. */
interface Library {
  connector: OutboxConnector<unknown>;
  insertOrder(tx: unknown, customer: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * PostgreSQL restarted (`pg_ctl restart`, fast and immediate) while an inbox
 * transaction is open, on every connector over node-postgres: that handle
 * rejects, the process lives (the pools have no `error` listener of the
 * test's: only what the connectors add), and the same message handled again
 * after the restart commits its effect once.
 */
describe('inbox across a PostgreSQL restart', () => {
  let server: PostgresServer;
  let url: string;
  let redis: Redis;

  const libraries: Record<string, () => Promise<Library>> = {
    pg: async () => {
      const pool = new Pool({ connectionString: url });
      return {
        connector: pgConnector(pool) as OutboxConnector<unknown>,
        insertOrder: async (tx, customer) =>
          void (await (tx as import('pg').PoolClient).query('insert into orders (customer) values ($1)', [customer])),
        close: () => pool.end(),
      };
    },
    typeorm: async () => {
      const dataSource = await new DataSource({ type: 'postgres', url, entities: [] }).initialize();
      return {
        connector: typeormConnector(dataSource) as OutboxConnector<unknown>,
        insertOrder: async (tx, customer) =>
          void (await (tx as import('typeorm').EntityManager).query('insert into orders (customer) values ($1)', [customer])),
        close: () => dataSource.destroy(),
      };
    },
    kysely: async () => {
      const pool = new Pool({ connectionString: url });
      const db = new Kysely<{ orders: { customer: string } }>({ dialect: new PostgresDialect({ pool }) });
      return {
        connector: kyselyConnector(db, { pool }) as OutboxConnector<unknown>,
        insertOrder: async (tx, customer) => void (await sql`insert into orders (customer) values (${customer})`.execute(tx as typeof db)),
        close: () => db.destroy(),
      };
    },
    drizzle: async () => {
      const pool = new Pool({ connectionString: url });
      const db = drizzle(pool);
      return {
        connector: drizzleConnector(db) as OutboxConnector<unknown>,
        insertOrder: async (tx, customer) =>
          void (await (tx as typeof db).execute(drizzleSql`insert into orders (customer) values (${customer})`)),
        close: () => pool.end(),
      };
    },
  };

  beforeAll(async () => {
    server = await startPostgres();
    url = await server.createDatabase();
    const pool = new Pool({ connectionString: url });
    await pool.query('create table orders (id serial primary key, customer text not null)');
    await pool.end();
    redis = new Redis(testRedisUrl());
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  jest.setTimeout(60_000);

  describe.each(Object.keys(libraries))('%s', (name) => {
    let library: Library;
    let app: INestApplicationContext;
    let prefix: string;

    beforeEach(async () => {
      library = await libraries[name]();
      prefix = uniquePrefix('pgrestart');
      app = await createOutboxApp(
        { prefix, autoStart: false },
        { connector: library.connector, ...uniqueTables(), relay: { enabled: false }, inbox: { pruneIntervalMs: 0 } },
      );
    });
    afterEach(async () => {
      await app?.close();
      await library?.close();
      await deletePrefix(redis, prefix);
    });

    it.each(['fast', 'immediate'] as const)('fails the handle open across a %s restart, and the retry commits once', async (mode) => {
      const inbox = app.get(EventrailInbox);
      const customer = `${name}-${mode}`;
      const orders = async (): Promise<number> =>
        Number((await library.connector.query('select count(*) as n from orders where customer = $1', [customer]))[0].n);
      // Two handles at once before, so the pool holds a second connection that sits idle through the restart.
      let open = 0;
      await Promise.all(
        [1, 2].map((n) =>
          inbox.handle({ group: 'billing', id: `warm-${n}-${customer}` }, async () => {
            open++;
            await waitFor(() => open === 2, 'both warm-up transactions open');
          }),
        ),
      );
      const message = { group: 'billing', id: `evt-${customer}` };
      let restarted = false;
      const handled = inbox.handle(message, async (tx) => {
        await library.insertOrder(tx, customer);
        await server.restart(mode);
        restarted = true;
        await library.insertOrder(tx, customer);
      });
      await expect(handled).rejects.toThrow();
      expect(restarted).toBe(true);
      expect(await orders()).toBe(0);
      // What the consumer's retry does: the same message again, now on a new connection.
      const retried = await inbox.handle(message, async (tx) => library.insertOrder(tx, customer));
      const again = await inbox.handle(message, async (tx) => library.insertOrder(tx, customer));
      expect([retried, again]).toEqual([{ duplicate: false, result: undefined }, { duplicate: true }]);
      expect(await orders()).toBe(1);
    });
  });
});
