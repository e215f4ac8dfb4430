import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { EventrailOutboxAdmin, EventrailOutboxRelay, pgConnector } from '../../lib/outbox';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, logEntries, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';
import { seededRandom } from '../support/seeded-random';

const KiB = 1024;

/**
 * What the relay reads per batch is bounded by bytes, and a row too large to read is marked failed
 * unread, so one hand-written giant row cannot crash every relay in turn inside the driver's parser.
 */
describe('outbox rows of any size', () => {
  let server: PostgresServer;
  let pool: Pool;
  let redis: Redis;
  let apps: INestApplicationContext[] = [];
  const prefixes: string[] = [];

  const start = async (
    prefix: string,
    tables: { outboxTable: string; inboxTable: string },
    maxBatchBytes: number,
    maxPayloadBytes: number,
  ): Promise<INestApplicationContext> => {
    prefixes.push(prefix);
    const app = await createOutboxApp(
      { prefix, partitions: 1, autoStart: false, maxPayloadBytes },
      { connector: pgConnector(pool), ...tables, relay: { pollIntervalMs: 20, maxBatchBytes, retryBackoffMs: 20, retryBackoffMaxMs: 200 } },
    );
    apps.push(app);
    return app;
  };
  /** A row written by hand: `bytes` of JSON (a string padded to size). */
  const stage = async (table: string, prefix: string, name: string, key: string | null, bytes: number): Promise<void> => {
    const padding = Math.max(0, bytes - JSON.stringify({ name, pad: '' }).length);
    await pool.query(
      `insert into ${table} (event_id, event, key, data, log) values ($1, 'a', $2, '{"name":"' || $1 || '","pad":"' || repeat('x', $3) || '"}', $4)`,
      [name, key, padding, prefix],
    );
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

  jest.setTimeout(120_000);

  it('reads at most maxBatchBytes per batch, and marks a row too large to read failed without reading it', async () => {
    const tables = uniqueTables();
    const prefix = uniquePrefix('large');
    const app = await start(prefix, tables, 32 * KiB, 64 * KiB);
    await app.get(EventrailOutboxAdmin).status();
    const relay = app.get(EventrailOutboxRelay);
    await waitFor(() => relay.isActive(), 'the relay is active');
    // Ten rows of 20 KiB: two do not fit in 32 KiB, so each batch holds one.
    for (let i = 0; i < 10; i++) await stage(tables.outboxTable, prefix, `small-${i}`, `k${i % 3}`, 20 * KiB);
    // Over the bound on rows read alone (the larger of maxBatchBytes and maxPayloadBytes).
    await stage(tables.outboxTable, prefix, 'huge', 'k0', 1024 * KiB);
    await stage(tables.outboxTable, prefix, 'after-huge', 'k1', 1 * KiB);
    // Over maxBatchBytes, under maxPayloadBytes: read alone and appended.
    await stage(tables.outboxTable, prefix, 'alone', 'k2', 50 * KiB);
    await waitFor(async () => (await app.get(EventrailOutboxAdmin).status()).depth === 0, 'everything readable relayed');
    const log = (await logEntries(redis, prefix)).map((e) => e.id);
    expect(log).toEqual([...Array.from({ length: 10 }, (_, i) => `small-${i}`), 'after-huge', 'alone']);
    expect(relay.stats().batches).toBeGreaterThanOrEqual(11);
    const [failed] = (await pool.query(`select event_id, failed from ${tables.outboxTable} where failed is not null`)).rows;
    expect(failed.event_id).toBe('huge');
    expect(failed.failed).toMatch(/1048\d\d\d bytes.*not read/);
  });

  it('relays generated rows of random sizes around the bounds, in order, failing exactly the ones over the row bound', async () => {
    const random = seededRandom(31);
    const tables = uniqueTables();
    const prefix = uniquePrefix('sizes');
    const [batchBytes, payloadBytes] = [24 * KiB, 48 * KiB];
    const app = await start(prefix, tables, batchBytes, payloadBytes);
    await app.get(EventrailOutboxAdmin).status();
    const staged: Array<{ name: string; key: string; bytes: number }> = [];
    for (let i = 0; i < 60; i++) {
      const bytes = Math.floor(random() < 0.1 ? payloadBytes + 1 + random() * 100 * KiB : 100 + random() * (payloadBytes - 100));
      const row = { name: `r${i}`, key: `k${Math.floor(random() * 4)}`, bytes };
      staged.push(row);
      await stage(tables.outboxTable, prefix, row.name, row.key, bytes);
    }
    const firstTooLarge = new Map<string, number>();
    staged.forEach((row, i) => {
      if (row.bytes > payloadBytes && !firstTooLarge.has(row.key)) firstTooLarge.set(row.key, i);
    });
    const expected = staged.filter((row, i) => i < (firstTooLarge.get(row.key) ?? Infinity)).map((row) => row.name);
    await waitFor(async () => (await logEntries(redis, prefix)).length === expected.length, 'the readable rows relayed');
    await waitFor(async () => (await app.get(EventrailOutboxAdmin).status()).failed === firstTooLarge.size, 'the large rows failed');
    expect((await logEntries(redis, prefix)).map((e) => e.id)).toEqual(expected);
  });
  it("appends each row's data as stored, byte for byte (generated JSON texts), and fails exactly the rows that are not JSON or over maxPayloadBytes", async () => {
    const random = seededRandom(47);
    const tables = uniqueTables();
    const prefix = uniquePrefix('stored');
    const payloadBytes = 4 * KiB;
    const app = await start(prefix, tables, 64 * KiB, payloadBytes);
    await app.get(EventrailOutboxAdmin).status();
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)];
    const space = (): string => pick(['', '', ' ', '\n', '\t ', '  \r\n']);
    const scalar = (): string =>
      pick([
        () => String(Math.floor(random() * 2e9) - 1e9),
        () => pick(['1e3', '-0', '2.50', '0.1E-7', '12345678901234567890']),
        () => pick(['true', 'false', 'null']),
        () => JSON.stringify(pick(['', 'plain', 'é', '𝄞', '\u2028', '"quoted"', '\\'])),
        () => pick(['"\\u00e9"', '"\\ud834\\udd1e"', '"tab\\tnew\\nline"', '"\\/"']),
      ])();
    const value = (depth: number): string => {
      const roll = random();
      if (depth > 2 || roll < 0.4) return scalar();
      const items = Array.from({ length: Math.floor(random() * 4) }, () => value(depth + 1));
      if (roll < 0.7) return `[${space()}${items.join(`${space()},${space()}`)}${space()}]`;
      const keys = items.map(
        (item, i) => `${JSON.stringify(pick(['a', 'b', '__proto__', 'constructor', `k${i}`, '']))}${space()}:${space()}${item}`,
      );
      return `{${space()}${keys.join(`,${space()}`)}${space()}}`;
    };
    const rows: Array<{ name: string; data: string; ok: boolean }> = [];
    for (let i = 0; i < 150; i++) {
      const roll = random();
      let data = `${space()}${value(0)}${space()}`;
      if (roll < 0.06) data = pick(['{"unclosed": ', "{'single': 1}", 'NaN', '[1,]', '', 'undefined', '{"a":1}{"b":2}']);
      else if (roll < 0.1) data = JSON.stringify({ pad: 'x'.repeat(payloadBytes) });
      rows.push({ name: `r${i}`, data, ok: roll >= 0.1 });
    }
    // Keyless, so a failed row holds no other row back.
    for (const row of rows) {
      await pool.query(`insert into ${tables.outboxTable} (event_id, event, data, log) values ($1, 'hand.written', $2, $3)`, [
        row.name,
        row.data,
        prefix,
      ]);
    }
    const good = rows.filter((row) => row.ok);
    const log = async (): Promise<Array<[string, string[]]>> => redis.xrange(`{${prefix}:0}:log`, '-', '+');
    await waitFor(async () => (await log()).length === good.length, 'the good rows relayed');
    await waitFor(async () => (await app.get(EventrailOutboxAdmin).status()).failed === rows.length - good.length, 'the bad rows failed');
    const field = (fields: string[], name: string): string => fields[fields.indexOf(name) + 1];
    expect((await log()).map(([, fields]) => ({ name: field(fields, 'id'), data: field(fields, 'data') }))).toEqual(
      good.map(({ name, data }) => ({ name, data })),
    );
    const failed = (await pool.query(`select event_id, failed from ${tables.outboxTable} where failed is not null order by id`)).rows;
    expect(failed.map((row: { event_id: string }) => row.event_id)).toEqual(rows.filter((row) => !row.ok).map((row) => row.name));
    for (const row of failed) expect(row.failed).toMatch(/not JSON|maxPayloadBytes|bytes/);
  });
});
