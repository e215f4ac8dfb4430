import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { Client, Pool, PoolClient } from 'pg';
import { EventrailOutbox, EventrailOutboxRelay, OutboxSchemaMismatchError, pgConnector } from '../../lib/outbox';
import { migrationSql, notifyChannel } from '../../lib/outbox/outbox-schema';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, logEntries, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';
import { seededRandom } from '../support/seeded-random';

/** The outbox where it meets PostgreSQL's limits: lock namespaces, identifier lengths, shared tables, odd rows. */
describe('outbox at the database edge', () => {
  let server: PostgresServer;
  let pool: Pool;
  let redis: Redis;
  let apps: INestApplicationContext[] = [];
  const prefixes: string[] = [];

  const start = async (
    prefix: string,
    tables: { outboxTable: string; inboxTable: string },
    relay: boolean,
    extra: { maxPayloadBytes?: number } = {},
  ): Promise<INestApplicationContext> => {
    prefixes.push(prefix);
    const app = await createOutboxApp(
      { prefix, autoStart: false, ...extra },
      {
        connector: pgConnector(pool),
        ...tables,
        relay: { enabled: relay, pollIntervalMs: 100, retryBackoffMs: 20, retryBackoffMaxMs: 200 },
      },
    );
    apps.push(app);
    return app;
  };
  const inTransaction = async <T>(work: (client: PoolClient) => Promise<T>): Promise<T> => {
    const client = await pool.connect();
    try {
      await client.query('begin');
      const result = await work(client);
      await client.query('commit');
      return result;
    } catch (error) {
      await client.query('rollback');
      throw error;
    } finally {
      client.release();
    }
  };

  beforeAll(async () => {
    server = await startPostgres();
    pool = new Pool({ connectionString: await server.createDatabase(), max: 20 });
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

  jest.setTimeout(120_000);

  it("never makes a key wait for the relay's lock, even a key whose lock hashes like the relay's", async () => {
    const tables = uniqueTables();
    const base = uniquePrefix('lock');
    // A birthday search in SQL: a log prefix and a key whose lock strings have the same 32-bit hashtext.
    // 300 000 of each: about 21 matches expected, none with a chance of e^-21 (150 000 of each left none
    // about once in 190 runs: e^-5.2, which a CI run met).
    const rows = await inTransaction(async (client) => {
      await client.query('set local enable_nestloop = off');
      const found = await client.query(
        `with p as materialized (select i, hashtext('relay ' || $1 || i || ' ' || $2) as h from generate_series(1, 300000) as i),
           k as materialized (select j, hashtext($2 || '|k:key' || j) as h from generate_series(1, 300000) as j)
         select p.i, k.j from p join k using (h) limit 1`,
        [base, tables.outboxTable],
      );
      return found.rows;
    });
    expect(rows).toHaveLength(1);
    const prefix = `${base}${rows[0].i}`;
    const app = await start(prefix, tables, true);
    await waitFor(() => app.get(EventrailOutboxRelay).isActive(), 'the relay is active');
    const outbox = app.get(EventrailOutbox);
    const random = seededRandom(5);
    const keys = [`key${rows[0].j}`, ...Array.from({ length: 200 }, () => Math.floor(random() * 2 ** 48).toString(36))];
    for (const key of keys) {
      await inTransaction(async (client) => {
        await client.query(`set local lock_timeout = '2s'`);
        await outbox.publish(client, 'a', { key }, { key });
        // The key lock and the relay's lock are held at once here: they must be different locks.
        const { rows: locks } = await client.query(
          `select classid::int, objid::int from pg_locks where locktype = 'advisory' and granted order by pid = pg_backend_pid()`,
        );
        expect(new Set(locks.map((l: { classid: number }) => l.classid)).size).toBe(2);
      });
    }
    await waitFor(async () => (await logEntries(redis, prefix)).length === keys.length, 'every keyed row relayed');
  });

  it('notifies on every valid table name, however long, and relays from the longest', async () => {
    const random = seededRandom(7);
    const letters = 'abcdefghijklmnopqrstuvwxyz0123456789_';
    const name = (length: number): string =>
      String.fromCharCode(97 + Math.floor(random() * 26)) +
      Array.from({ length: length - 1 }, () => letters[Math.floor(random() * letters.length)]).join('');
    const listener = new Client({
      connectionString: (pool as unknown as { options: { connectionString: string } }).options.connectionString,
    });
    await listener.connect();
    try {
      const heard = new Set<string>();
      listener.on('notification', (message) => heard.add(message.channel));
      for (let i = 0; i < 40; i++) {
        const schema = i % 2 === 0 ? name(1 + Math.floor(random() * 63)) : undefined;
        const table = `${schema ? `${schema}.` : ''}${name(i < 4 ? 63 : 1 + Math.floor(random() * 63))}`;
        const inbox = `${schema ? `${schema}.` : ''}i${i}_${name(8)}`;
        if (schema) await pool.query(`create schema if not exists "${schema}"`);
        await pool.query(migrationSql({ outbox: table, inbox }));
        const channel = notifyChannel(table);
        expect(Buffer.byteLength(channel)).toBeLessThanOrEqual(63);
        await listener.query(`listen "${channel}"`);
        await pool.query(
          `insert into ${table
            .split('.')
            .map((part) => `"${part}"`)
            .join('.')} (event_id, event, data) values ('e', 'a', '1')`,
        );
        await waitFor(() => heard.has(channel), `a NOTIFY on ${channel} for ${table}`);
      }
    } finally {
      await listener.end();
    }
    const longest = { outboxTable: `${'s'.repeat(63)}.${'o'.repeat(63)}`, inboxTable: `${'s'.repeat(63)}.${'i'.repeat(63)}` };
    await pool.query(`create schema if not exists "${'s'.repeat(63)}"`);
    const prefix = uniquePrefix('long');
    const app = await start(prefix, longest, true);
    await inTransaction((client) => app.get(EventrailOutbox).publish(client, 'a', { n: 1 }, { key: 'k' }));
    await waitFor(async () => (await logEntries(redis, prefix)).length === 1, 'relayed from a 127-character table name');
  });

  it('keeps two logs that share a table apart: each relay takes only its own rows', async () => {
    const tables = uniqueTables();
    const [first, second] = [uniquePrefix('shareA'), uniquePrefix('shareB')];
    const a = await start(first, tables, true);
    const b = await start(second, tables, true);
    await waitFor(() => a.get(EventrailOutboxRelay).isActive() && b.get(EventrailOutboxRelay).isActive(), 'both relays active');
    for (let t = 0; t < 20; t++) {
      await Promise.all(
        [a, b].map((app, which) =>
          inTransaction((client) =>
            app.get(EventrailOutbox).publishMany(
              client,
              Array.from({ length: 5 }, (_, i) => ({ event: 'a', data: { log: which, n: t * 5 + i }, key: `k${i}` })),
            ),
          ),
        ),
      );
    }
    await waitFor(async () => (await pool.query(`select 1 from ${tables.outboxTable}`)).rowCount === 0, 'both relays drained');
    const [ofFirst, ofSecond] = [await logEntries(redis, first), await logEntries(redis, second)];
    expect(ofFirst.map((e) => (e.data as { log: number }).log)).toEqual(Array(100).fill(0));
    expect(ofSecond.map((e) => (e.data as { log: number }).log)).toEqual(Array(100).fill(1));
  });

  it('refuses at startup a table of another shape, naming what differs', async () => {
    const shapes: Array<[string, string, RegExp]> = [
      [
        'inbox',
        'create table %s (group_name text not null, event_id text primary key, handled_at timestamptz not null default now())',
        /primary key is \(event_id\)/,
      ],
      [
        'outbox',
        'create table %s (id bigserial primary key, event_id text not null, event text not null, data jsonb not null)',
        /data is jsonb/,
      ],
      [
        'outbox',
        'create table %s (id bigserial primary key, event_id text not null, event text not null, key text, partition integer, data text not null, headers text, created_at timestamptz not null default now(), failed text, log text, tenant text not null)',
        /tenant is not null and has no default/,
      ],
    ];
    // Every column the outbox needs, dropped in turn, is named.
    for (const column of ['event_id', 'event', 'key', 'partition', 'data', 'headers', 'created_at', 'failed']) {
      shapes.push([
        'outbox',
        `create table %s (id bigserial primary key, event_id text not null, event text not null, key text, partition integer, data text not null, headers text, created_at timestamptz not null default now(), failed text); alter table %s drop column ${column}`,
        new RegExp(`column ${column} \\(`),
      ]);
    }
    for (const [which, ddl, expected] of shapes) {
      const tables = uniqueTables();
      const table = which === 'inbox' ? tables.inboxTable : tables.outboxTable;
      await pool.query(ddl.replace(/%s/g, table));
      for (const ensureSchema of [true, false]) {
        const failure = createOutboxApp(
          { prefix: uniquePrefix('shape'), autoStart: false },
          { connector: pgConnector(pool), ...tables, ensureSchema, relay: { enabled: false } },
        );
        await expect(failure).rejects.toThrow(OutboxSchemaMismatchError);
        await expect(failure).rejects.toThrow(expected);
      }
    }
  });

  it('adds the log column to a table made before it, and relays the rows already there', async () => {
    const tables = uniqueTables();
    await pool.query(
      `create table ${tables.outboxTable} (id bigserial primary key, event_id text not null, event text not null, key text, partition integer, data text not null, headers text, created_at timestamptz not null default now(), failed text);
       insert into ${tables.outboxTable} (event_id, event, data) values ('old-1', 'a', '{"n":1}')`,
    );
    const refused = createOutboxApp(
      { prefix: uniquePrefix('old'), autoStart: false },
      { connector: pgConnector(pool), ...tables, ensureSchema: false, relay: { enabled: false } },
    );
    await expect(refused).rejects.toThrow(/column log \(text\) is missing.*eventrail outbox migrate/);
    const prefix = uniquePrefix('old');
    await start(prefix, tables, true);
    await waitFor(async () => (await logEntries(redis, prefix)).length === 1, 'the row from before the migration relayed');
  });
});
