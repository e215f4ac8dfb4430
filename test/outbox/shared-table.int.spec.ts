import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { EventrailOutboxAdmin, EventrailOutboxRelay, pgConnector } from '../../lib/outbox';
import { migrationSql } from '../../lib/outbox/outbox-schema';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, logEntries, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';

interface HandRow {
  id: string;
  key: string | null;
  data?: string;
  failed?: string | null;
  log: string | null;
}

/**
 * An outbox table shared by two logs, with rows written by hand: rows without a log, failed marks set
 * by another process, and each log's status. Relays poll rarely here, so only what a read sees in the
 * table itself can hold or release a key.
 */
describe('outbox table shared by two logs', () => {
  let server: PostgresServer;
  let pool: Pool;
  let redis: Redis;
  let apps: INestApplicationContext[] = [];
  const prefixes: string[] = [];
  jest.setTimeout(120_000);

  const start = async (
    prefix: string,
    tables: { outboxTable: string; inboxTable: string },
    options: { batchSize?: number; pollIntervalMs?: number; ensureSchema?: boolean } = {},
  ): Promise<INestApplicationContext> => {
    prefixes.push(prefix);
    const app = await createOutboxApp(
      { prefix, partitions: 1, autoStart: false },
      {
        connector: pgConnector(pool),
        ...tables,
        ensureSchema: options.ensureSchema ?? true,
        relay: {
          batchSize: options.batchSize ?? 500,
          pollIntervalMs: options.pollIntervalMs ?? 60_000,
          retryBackoffMs: 20,
          retryBackoffMaxMs: 200,
        },
      },
    );
    apps.push(app);
    await waitFor(() => app.get(EventrailOutboxRelay).isActive(), `relay of ${prefix} active`);
    return app;
  };
  const insert = async (table: string, rows: HandRow[]): Promise<void> => {
    for (let i = 0; i < rows.length; i += 1000) {
      const chunk = rows.slice(i, i + 1000);
      const values = chunk.map((_, j) => `($${j * 5 + 1}, 'a', $${j * 5 + 2}, $${j * 5 + 3}, $${j * 5 + 4}, $${j * 5 + 5})`).join(', ');
      await pool.query(
        `insert into ${table} (event_id, event, key, data, failed, log) values ${values}`,
        chunk.flatMap((r) => [r.id, r.key, r.data ?? JSON.stringify({ id: r.id }), r.failed ?? null, r.log]),
      );
    }
  };
  const ids = async (prefix: string): Promise<string[]> => (await logEntries(redis, prefix)).map((e) => e.id);

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

  it('relays rows without a log to the one log that owns them (the first set up on the table), each once', async () => {
    const tables = uniqueTables();
    const [first, second] = [uniquePrefix('ownA'), uniquePrefix('ownB')];
    await start(first, tables, { batchSize: 50, pollIntervalMs: 50 });
    await start(second, tables, { batchSize: 50, pollIntervalMs: 50 });
    const n = 3000;
    await insert(
      tables.outboxTable,
      Array.from({ length: n }, (_, i) => ({ id: `L${i}`, key: `k${i % 7}`, log: null })),
    );
    await waitFor(async () => (await ids(first)).length === n, 'every row without a log relayed to the first log', 60_000);
    expect(await ids(second)).toEqual([]);
    expect(await ids(first)).toEqual(Array.from({ length: n }, (_, i) => `L${i}`));
  });

  it("gives rows without a log to the log the column's default names, and to no other, even when the owner changes", async () => {
    const tables = uniqueTables();
    const [first, second] = [uniquePrefix('defA'), uniquePrefix('defB')];
    await start(first, tables, { batchSize: 20, pollIntervalMs: 50 });
    await start(second, tables, { batchSize: 20, pollIntervalMs: 50 });
    // Hand inserts that leave out the log take the owner's from the column's default.
    await pool.query(`insert into ${tables.outboxTable} (event_id, event, data) values ('D1', 'a', '{}')`);
    await waitFor(async () => (await ids(first)).includes('D1'), 'D1 relayed to the first log');
    // The owner changes while rows without a log keep coming: each row still reaches exactly one log.
    let n = 0;
    let staging = true;
    const producer = (async () => {
      while (staging) {
        await insert(
          tables.outboxTable,
          Array.from({ length: 10 }, () => ({ id: `N${n++}`, key: null, log: null })),
        );
      }
    })();
    await waitFor(() => n > 500, 'rows staged');
    await pool.query(`alter table ${tables.outboxTable} alter column log set default '${second}'`);
    await waitFor(() => n > 1500, 'more rows staged', 60_000);
    staging = false;
    await producer;
    await waitFor(async () => (await pool.query(`select 1 from ${tables.outboxTable}`)).rowCount === 0, 'drained', 60_000);
    const [a, b] = [await ids(first), await ids(second)];
    expect(a.filter((id) => b.includes(id))).toEqual([]);
    expect(a.length + b.length).toBe(n + 1);
    expect(b.length).toBeGreaterThan(0);
  });

  it('leaves rows without a log alone when no log owns them', async () => {
    const tables = uniqueTables();
    await pool.query(migrationSql({ outbox: tables.outboxTable, inbox: tables.inboxTable }));
    const prefix = uniquePrefix('noown');
    const app = await start(prefix, tables, { pollIntervalMs: 50, ensureSchema: false });
    await insert(tables.outboxTable, [
      { id: 'ORPHAN', key: null, log: null },
      { id: 'MINE', key: null, log: prefix },
    ]);
    await waitFor(
      async () => (await pool.query(`select 1 from ${tables.outboxTable} where event_id = 'MINE'`)).rowCount === 0,
      'its own row relayed and deleted',
    );
    expect(await ids(prefix)).toEqual(['MINE']);
    expect(await app.get(EventrailOutboxAdmin).status()).toMatchObject({ depth: 0 });
    expect((await pool.query(`select event_id from ${tables.outboxTable}`)).rows).toEqual([{ event_id: 'ORPHAN' }]);
  });

  it('holds a key behind a failed mark another process set, from the very next read', async () => {
    const tables = uniqueTables();
    const prefix = uniquePrefix('elsewhere');
    await start(prefix, tables);
    for (let round = 0; round < 5; round++) {
      const key = `k${round}`;
      await insert(tables.outboxTable, [
        { id: `X${round}`, key, failed: 'marked elsewhere', log: prefix },
        { id: `Y${round}`, key, log: prefix },
        { id: `M${round}`, key: null, log: prefix },
      ]);
      await waitFor(async () => (await ids(prefix)).includes(`M${round}`), 'the keyless marker relayed');
      expect(await ids(prefix)).not.toContain(`Y${round}`);
    }
  });

  it('does not hold one log behind the failed rows of the other, and counts only its own rows', async () => {
    const tables = uniqueTables();
    const [first, second] = [uniquePrefix('stA'), uniquePrefix('stB')];
    const a = await start(first, tables);
    const b = await start(second, tables);
    await insert(tables.outboxTable, [
      { id: 'X1', key: 'k', data: 'not json', log: first },
      { id: 'Y1', key: 'k', log: first },
      { id: 'Y2', key: 'k', log: second },
    ]);
    await waitFor(
      async () => (await pool.query(`select 1 from ${tables.outboxTable} where event_id = 'Y2'`)).rowCount === 0,
      "the second log's row of k relayed and deleted",
    );
    await waitFor(async () => (await a.get(EventrailOutboxAdmin).status()).failed === 1, 'X1 failed');
    expect(await a.get(EventrailOutboxAdmin).status()).toMatchObject({ depth: 1, failed: 1, held: 1 });
    expect(await b.get(EventrailOutboxAdmin).status()).toMatchObject({ depth: 0, failed: 0, held: 0, oldestAgeMs: null });
    expect(await ids(first)).toEqual([]);
    expect(await ids(second)).toEqual(['Y2']);
  });
});
