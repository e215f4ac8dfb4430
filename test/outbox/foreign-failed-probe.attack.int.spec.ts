import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { EventrailOutboxRelay, pgConnector } from '../../lib/outbox';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, logEntries, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';

/**
 * The held-key look is "one index probe per keyed row scanned, whatever the number of held keys", and
 * about twice the unheld drain time with 20,000 held rows. Here the failed rows that fill the index are
 * another log's, of the same key as this log's held rows: the probe for a held row walks them all.
 */
describe("attack: another log's failed rows under this log's held key", () => {
  let server: PostgresServer;
  let pool: Pool;
  let redis: Redis;
  const apps: INestApplicationContext[] = [];
  const prefixes: string[] = [];
  jest.setTimeout(150_000);

  beforeAll(async () => {
    server = await startPostgres();
    pool = new Pool({ connectionString: await server.createDatabase(), max: 10 });
    redis = new Redis(testRedisUrl());
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    for (const prefix of prefixes) await deletePrefix(redis, prefix);
    await pool?.end();
    redis?.disconnect();
    await server?.stop();
  });

  /** Stages `held` rows of key k behind one failed row of this log, then 500 keyless rows; the keyless drain time. */
  const drain = async (foreignFailed: number): Promise<number> => {
    const tables = uniqueTables();
    const [mine, other] = [uniquePrefix('pm'), uniquePrefix('po')];
    prefixes.push(mine, other);
    const app = await createOutboxApp(
      { prefix: mine, partitions: 1, autoStart: false },
      { connector: pgConnector(pool), ...tables, relay: { batchSize: 100, pollIntervalMs: 60_000 } },
    );
    apps.push(app);
    await waitFor(() => app.get(EventrailOutboxRelay).isActive(), 'active');
    const t = tables.outboxTable;
    await pool.query(
      `insert into ${t} (event_id, event, key, data, failed, log) select 'o' || i, 'a', 'k', '{}', 'refused', $1 from generate_series(1, $2::int) i`,
      [other, foreignFailed],
    );
    await pool.query(`insert into ${t} (event_id, event, key, data, failed, log) values ('F', 'a', 'k', '{}', 'refused', $1)`, [mine]);
    await pool.query(
      `insert into ${t} (event_id, event, key, data, log) select 'h' || i, 'a', 'k', '{}', $1 from generate_series(1, 2000) i`,
      [mine],
    );
    await pool.query(`analyze ${t}`);
    const started = Date.now();
    await pool.query(
      `insert into ${t} (event_id, event, key, data, log) select 'x' || i, 'a', null, '{}', $1 from generate_series(1, 500) i`,
      [mine],
    );
    await waitFor(async () => (await logEntries(redis, mine)).length === 500, 'keyless rows relayed', 120_000, 50);
    return Date.now() - started;
  };

  it("drains this log's keyless rows about as fast when the held key's index entries are mostly another log's", async () => {
    const alone = await drain(0);
    const crowded = await drain(5000);
    console.log(
      `500 keyless rows behind 2,000 held rows: ${alone} ms alone, ${crowded} ms with 5,000 failed rows of the other log on the key`,
    );
    expect(crowded).toBeLessThan(Math.max(4 * alone, 3_000));
  });
});
