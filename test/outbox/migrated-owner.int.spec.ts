import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { EventrailOutboxAdmin, EventrailOutboxRelay, pgConnector } from '../../lib/outbox';
import { assertBuilt, cliEnv, runCli } from '../cli/cli.harness';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, logEntries, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';

/**
 * A table made by `eventrail outbox migrate` has no owner for rows without a log "until you set it", and
 * with `ensureSchema` the owner is "the first log set up on the table". Here two logs are set up on a
 * migrated table first; a third joins later with `ensureSchema` on.
 */
describe('outbox: a log that joins a migrated table late', () => {
  let server: PostgresServer;
  let url: string;
  let pool: Pool;
  let redis: Redis;
  const apps: INestApplicationContext[] = [];
  const prefixes: string[] = [];
  jest.setTimeout(90_000);

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
    assertBuilt();
    server = await startPostgres();
    url = await server.createDatabase();
    pool = new Pool({ connectionString: url, max: 10 });
    redis = new Redis(testRedisUrl());
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    for (const prefix of prefixes) await deletePrefix(redis, prefix);
    await pool?.end();
    redis?.disconnect();
    await server?.stop();
  });

  it('does not hand the rows without a log to a third log that joins with ensureSchema', async () => {
    const tables = uniqueTables();
    const migrated = await runCli(
      ['outbox', 'migrate', '--database-url', url, '--outbox-table', tables.outboxTable, '--inbox-table', tables.inboxTable],
      cliEnv('unused'),
    );
    expect(migrated.code).toBe(0);
    const [first, second, third] = [uniquePrefix('mgA'), uniquePrefix('mgB'), uniquePrefix('mgC')];
    await start(first, tables, false);
    await start(second, tables, false);
    // Rows written without a log (by hand, or by an older writer): no log owns them yet.
    await pool.query(
      `insert into ${tables.outboxTable} (event_id, event, data, log) select 'L' || i, 'a', '{}', null from generate_series(1, 20) i`,
    );
    await pool.query(`insert into ${tables.outboxTable} (event_id, event, data, log) values ('mark', 'a', '{}', $1)`, [first]);
    await waitFor(async () => (await logEntries(redis, first)).length === 1, "the first log's own row relayed");
    const late = await start(third, tables, true);
    await pool.query(`insert into ${tables.outboxTable} (event_id, event, data, log) values ('mark3', 'a', '{}', $1)`, [third]);
    await waitFor(async () => (await logEntries(redis, third)).some((e) => e.id === 'mark3'), "the third log's own row relayed");
    // The relay deletes a row once Redis acknowledged it, so the row outlives its entry for a moment.
    await waitFor(
      async () => (await pool.query(`select 1 from ${tables.outboxTable} where event_id = 'mark3'`)).rowCount === 0,
      "the third log's own row deleted after its append",
    );
    const owner = (
      await pool.query(`select column_default from information_schema.columns where table_name = $1 and column_name = 'log'`, [
        tables.outboxTable,
      ])
    ).rows[0]?.column_default as string | null;
    const status = await late.get(EventrailOutboxAdmin).status();
    expect({
      owner,
      thirdLog: (await logEntries(redis, third)).map((e) => e.id),
      thirdDepth: status.depth,
      waiting: Number((await pool.query(`select count(*) n from ${tables.outboxTable} where log is null`)).rows[0].n),
    }).toEqual({ owner: null, thirdLog: ['mark3'], thirdDepth: 0, waiting: 20 });
  });
});
