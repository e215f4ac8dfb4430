import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { EventrailOutboxAdmin, pgConnector } from '../../lib/outbox';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, logEntries, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';
import { seededRandom } from '../support/seeded-random';

/**
 * Staged rows the relay cannot append, written by hand: data that is not JSON (found before the append),
 * or an event name the publisher refuses (over 256 characters) (found by the refused append).
 */
const BROKEN_DATA = 'not json';
const BROKEN_EVENT = 'x'.repeat(300);

/**
 * A row the relay refuses holds its key's later rows until it is fixed or deleted, so the fix keeps
 * the key's order; keyless rows and other keys go on.
 */
describe('outbox rows the relay refuses', () => {
  let server: PostgresServer;
  let pool: Pool;
  let redis: Redis;
  let apps: INestApplicationContext[] = [];
  const prefixes: string[] = [];

  const start = async (prefix: string, outboxTable: string, inboxTable: string, batchSize: number): Promise<INestApplicationContext> => {
    prefixes.push(prefix);
    const app = await createOutboxApp(
      { prefix, partitions: 1, autoStart: false },
      {
        connector: pgConnector(pool),
        outboxTable,
        inboxTable,
        relay: { pollIntervalMs: 20, batchSize, retryBackoffMs: 20, retryBackoffMaxMs: 200 },
      },
    );
    apps.push(app);
    return app;
  };
  /** Rows neither failed nor held behind a failed row of their key: what the relay still has to take. */
  const relayable = async (table: string): Promise<number> =>
    Number(
      (
        await pool.query(
          `select count(*) as n from ${table} r where failed is null
             and not exists (select 1 from ${table} f where f.failed is not null and f.key = r.key and f.id < r.id)`,
        )
      ).rows[0].n,
    );
  const insert = async (table: string, prefix: string, rows: Array<{ name: string; key: string | null; broken: boolean }>) => {
    const values = rows.map((_, i) => `($${i * 5 + 1}, $${i * 5 + 2}, $${i * 5 + 3}, $${i * 5 + 4}, $${i * 5 + 5})`).join(', ');
    await pool.query(
      `insert into ${table} (event_id, event, key, data, log) values ${values}`,
      rows.flatMap((row, i) => {
        const brokenData = row.broken && (rows.length === 1 || i % 2 === 0);
        return [
          row.name,
          row.broken && !brokenData ? BROKEN_EVENT : 'a',
          row.key,
          brokenData ? BROKEN_DATA : JSON.stringify({ name: row.name }),
          prefix,
        ];
      }),
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

  it('holds the key behind a refused row, and relays both in order once the row is fixed', async () => {
    const { outboxTable, inboxTable } = uniqueTables();
    const prefix = uniquePrefix('held');
    const app = await start(prefix, outboxTable, inboxTable, 500);
    await app.get(EventrailOutboxAdmin).status(); // the schema exists
    await insert(outboxTable, prefix, [
      { name: 'A', key: 'k', broken: true },
      { name: 'B', key: 'k', broken: false },
      { name: 'C', key: 'other', broken: false },
    ]);
    await waitFor(async () => (await app.get(EventrailOutboxAdmin).status()).failed === 1, 'the broken row marked failed');
    await waitFor(async () => (await relayable(outboxTable)) === 0, 'the relay took all it could');
    await waitFor(async () => (await logEntries(redis, prefix)).length > 0, 'the other key relayed');
    expect(await app.get(EventrailOutboxAdmin).status()).toMatchObject({ depth: 1, failed: 1, held: 1 });
    expect((await logEntries(redis, prefix)).map((e) => e.id)).toEqual(['C']);
    const [failed] = (await pool.query(`select event_id, failed from ${outboxTable} where failed is not null`)).rows;
    expect(failed).toMatchObject({ event_id: 'A', failed: expect.stringMatching(/not JSON/) });
    // The documented fix: correct the row and clear failed.
    await pool.query(`update ${outboxTable} set data = '{"name":"A"}', failed = null where event_id = 'A'`);
    await waitFor(async () => (await logEntries(redis, prefix)).length === 3, 'the fixed row and the held one relayed');
    expect((await logEntries(redis, prefix)).map((e) => e.id)).toEqual(['C', 'A', 'B']);
  });

  it('keeps every key in id order across generated refusals, fixes and deletions', async () => {
    for (let schedule = 0; schedule < 30; schedule++) {
      const random = seededRandom(1000 + schedule);
      const { outboxTable, inboxTable } = uniqueTables();
      const prefix = uniquePrefix(`held${schedule}`);
      const app = await start(prefix, outboxTable, inboxTable, 1 + Math.floor(random() * 6));
      await app.get(EventrailOutboxAdmin).status();
      const keys = ['k0', 'k1', 'k2', 'k3', null];
      const staged: Array<{ name: string; key: string | null; broken: boolean }> = [];
      // Several transactions of rows, some broken, at random positions of random keys (keyless among them).
      for (let t = 0; t < 8; t++) {
        const rows = Array.from({ length: 1 + Math.floor(random() * 5) }, (_, i) => ({
          name: `s${schedule}-t${t}-${i}`,
          key: keys[Math.floor(random() * keys.length)],
          broken: random() < 0.2,
        }));
        staged.push(...rows);
        await insert(outboxTable, prefix, rows);
      }
      // A key's first broken row fails; its later rows (broken or not) wait behind it, unread.
      const firstBroken = new Map<string | null, number>();
      staged.forEach((row, i) => {
        if (row.broken && row.key !== null && !firstBroken.has(row.key)) firstBroken.set(row.key, i);
      });
      const behind = (row: { key: string | null }, i: number): boolean => row.key !== null && i > (firstBroken.get(row.key) ?? Infinity);
      const failedNow = staged.filter((row, i) => row.broken && !behind(row, i)).length;
      await waitFor(async () => (await relayable(outboxTable)) === 0, `schedule ${schedule}: the relay took all it could`);
      // A broken row behind another may be marked at once when both were in one batch: failed or held, it waits.
      const waiting = failedNow + staged.filter(behind).length;
      await waitFor(
        async () => {
          const status = await app.get(EventrailOutboxAdmin).status();
          return status.failed + status.held === waiting && status.failed >= failedNow;
        },
        `schedule ${schedule}: ${failedNow} rows failed and ${waiting - failedNow} held`,
      );
      const expectedNow = staged.filter((row, i) => !row.broken && !behind(row, i)).map((row) => row.name);
      await waitFor(async () => (await logEntries(redis, prefix)).length === expectedNow.length, `schedule ${schedule}: relayed`);
      expect((await logEntries(redis, prefix)).map((e) => e.id).sort()).toEqual([...expectedNow].sort());
      // Fix or delete a failed row at random until none is left; a fix can bring the next broken row of its key to light.
      const deleted = new Set<string>();
      for (;;) {
        await waitFor(async () => (await relayable(outboxTable)) === 0, `schedule ${schedule}: the relay took all it could`);
        const failed = (await pool.query(`select event_id from ${outboxTable} where failed is not null`)).rows.map(
          (row: { event_id: string }) => row.event_id,
        );
        if (failed.length === 0) break;
        const name = failed[Math.floor(random() * failed.length)];
        if (random() < 0.3) {
          deleted.add(name);
          await pool.query(`delete from ${outboxTable} where event_id = $1`, [name]);
        } else {
          await pool.query(`update ${outboxTable} set event = 'a', data = $1, failed = null where event_id = $2`, [
            JSON.stringify({ name }),
            name,
          ]);
        }
      }
      const expected = staged.filter((row) => !deleted.has(row.name));
      await waitFor(async () => (await logEntries(redis, prefix)).length === expected.length, `schedule ${schedule}: all relayed`);
      const log = (await logEntries(redis, prefix)).map((e) => e.id);
      expect([...log].sort()).toEqual(expected.map((row) => row.name).sort());
      for (const key of keys.filter((k) => k !== null)) {
        const ofKey = new Set(expected.filter((row) => row.key === key).map((row) => row.name));
        expect(log.filter((id) => ofKey.has(id))).toEqual(expected.filter((row) => row.key === key).map((row) => row.name));
      }
      await Promise.all(apps.map((a) => a.close()));
      apps = [];
    }
  });
  it('holds thousands of keys with odd characters behind failed marks set by hand, and releases each in order', async () => {
    const { outboxTable, inboxTable } = uniqueTables();
    const prefix = uniquePrefix('manyheld');
    const odd = ['a"b', 'a\\b', '{x,y}', 'NULL', ' ', 'é', '😀', 'a,b', "o'k", '\t', '[]', 'x'.repeat(1024)];
    const keys = Array.from({ length: 2000 }, (_, i) => (i < odd.length ? odd[i] : `key-${i}`));
    const app = await start(prefix, outboxTable, inboxTable, 500);
    await app.get(EventrailOutboxAdmin).status();
    const rows: Array<[string, string | null, string | null]> = [
      ...keys.map((key, i): [string, string | null, string | null] => [`X${i}`, key, 'marked by hand']),
      ...keys.flatMap((key, i): Array<[string, string | null, string | null]> => [
        [`H${i}-0`, key, null],
        [`H${i}-1`, key, null],
      ]),
      ...Array.from({ length: 1000 }, (_, i): [string, string | null, string | null] => [`F${i}`, null, null]),
    ];
    for (let i = 0; i < rows.length; i += 1000) {
      const chunk = rows.slice(i, i + 1000);
      await pool.query(
        `insert into ${outboxTable} (event_id, event, key, data, failed, log)
         select e, 'a', k, json_build_object('name', e)::text, f, $4 from unnest($1::text[], $2::text[], $3::text[]) as u(e, k, f)`,
        [chunk.map((r) => r[0]), chunk.map((r) => r[1]), chunk.map((r) => r[2]), prefix],
      );
    }
    await waitFor(async () => (await logEntries(redis, prefix)).length === 1000, 'the keyless rows relayed');
    await waitFor(async () => (await app.get(EventrailOutboxAdmin).status()).depth === 4000, 'the keyless rows deleted');
    expect(await app.get(EventrailOutboxAdmin).status()).toMatchObject({ depth: 4000, failed: 2000, held: 4000 });
    const random = seededRandom(42);
    const order = keys.map((_, i) => i).sort(() => random() - 0.5);
    for (let i = 0; i < order.length; i += 200) {
      await pool.query(`update ${outboxTable} set failed = null where event_id = any($1)`, [order.slice(i, i + 200).map((k) => `X${k}`)]);
    }
    await waitFor(async () => (await logEntries(redis, prefix)).length === 1000 + keys.length * 3, 'every held row relayed', 60_000);
    const log = await logEntries(redis, prefix);
    const byKey = new Map<string, string[]>();
    for (const entry of log) if (entry.key !== undefined) byKey.set(entry.key, [...(byKey.get(entry.key) ?? []), entry.id]);
    expect(keys.map((key, i) => [i, byKey.get(key)])).toEqual(keys.map((_, i) => [i, [`X${i}`, `H${i}-0`, `H${i}-1`]]));
  });
  it('relays a key in order when its failed row is fixed while the next batch is read', async () => {
    const { outboxTable, inboxTable } = uniqueTables();
    const prefix = uniquePrefix('fixedfast');
    const app = await start(prefix, outboxTable, inboxTable, 2);
    await app.get(EventrailOutboxAdmin).status();
    // The fix lands as the mark does: a trigger clears the mark and mends the data in the relay's own update.
    await pool.query(
      `create function ${outboxTable}_mend() returns trigger language plpgsql as $$
       begin new.failed := null; new.data := '{"name":"X"}'; return new; end $$;
       create trigger ${outboxTable}_mend before update of failed on ${outboxTable}
         for each row when (new.failed is not null) execute function ${outboxTable}_mend()`,
    );
    // One batch: X (refused, fixed at once) and O (appended); the next batch is read while O is appended.
    await insert(outboxTable, prefix, [
      { name: 'X', key: 'k', broken: true },
      { name: 'O', key: 'other', broken: false },
      { name: 'Y', key: 'k', broken: false },
      { name: 'Z', key: 'k', broken: false },
    ]);
    await waitFor(async () => (await logEntries(redis, prefix)).length === 4, 'every row relayed');
    expect((await logEntries(redis, prefix)).filter((e) => e.key === 'k').map((e) => e.id)).toEqual(['X', 'Y', 'Z']);
  });
});
