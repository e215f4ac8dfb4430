import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { EventrailOutboxAdmin, EventrailOutboxRelay, pgConnector } from '../../lib/outbox';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, logEntries, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';

/**
 * The log column's default names the log that owns rows without one. These set that default the ways
 * an operator or a migration tool writes it, other than the exact text the relay compares against.
 */
describe('outbox: the owner named by a default spelled another way', () => {
  let server: PostgresServer;
  let pool: Pool;
  let redis: Redis;
  let apps: INestApplicationContext[] = [];
  const prefixes: string[] = [];
  jest.setTimeout(60_000);

  const start = async (
    prefix: string,
    tables: { outboxTable: string; inboxTable: string },
    ensureSchema: boolean,
  ): Promise<INestApplicationContext> => {
    prefixes.push(prefix);
    const app = await createOutboxApp(
      { prefix, partitions: 1, autoStart: false },
      { connector: pgConnector(pool), ...tables, ensureSchema, relay: { pollIntervalMs: 50, retryBackoffMs: 20, retryBackoffMaxMs: 200 } },
    );
    apps.push(app);
    await waitFor(() => app.get(EventrailOutboxRelay).isActive(), `relay of ${prefix} active`);
    return app;
  };

  beforeAll(async () => {
    server = await startPostgres();
    pool = new Pool({ connectionString: await server.createDatabase(), max: 10 });
    redis = new Redis(testRedisUrl());
  });
  afterAll(async () => {
    await pool?.end();
    redis?.disconnect();
    await server?.stop();
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    for (const prefix of prefixes.splice(0)) await deletePrefix(redis, prefix);
  });

  it('relays rows without a log to the log the default names when it is a varchar literal', async () => {
    const spell = (p: string): string => `'${p}'::character varying`;
    const tables = uniqueTables();
    const owner = uniquePrefix('spl');
    // The table exists first, with no default (as `eventrail outbox migrate` leaves it)...
    const setup = await start(uniquePrefix('tmp'), tables, true);
    await pool.query(`alter table ${tables.outboxTable} alter column log drop default`);
    await setup.close();
    apps.splice(apps.indexOf(setup), 1);
    // ...then the operator names the owner.
    await pool.query(`alter table ${tables.outboxTable} alter column log set default ${spell(owner)}`);
    const shown = (
      await pool.query(`select column_default from information_schema.columns where table_name = $1 and column_name = 'log'`, [
        tables.outboxTable,
      ])
    ).rows[0];
    const app = await start(owner, tables, false);
    await pool.query(`insert into ${tables.outboxTable} (event_id, event, data, log) values ('U1', 'a', '{}', null)`);
    const status = await app.get(EventrailOutboxAdmin).status();
    let relayed: string[] = [];
    try {
      await waitFor(async () => (relayed = (await logEntries(redis, owner)).map((e) => e.id)).length > 0, 'U1 relayed', 5_000);
    } catch {
      // reported below
    }
    expect({ default: shown?.column_default, depth: status.depth, relayed }).toEqual({
      default: shown?.column_default,
      depth: 1,
      relayed: ['U1'],
    });
  });
});
