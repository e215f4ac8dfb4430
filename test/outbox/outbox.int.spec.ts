import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { Pool, PoolClient } from 'pg';
import {
  InvalidEventDataError,
  InvalidEventNameError,
  InvalidOptionError,
  InvalidPublishOptionsError,
  PayloadTooLargeError,
} from '../../lib';
import {
  EventrailOutbox,
  EventrailOutboxRelay,
  InvalidOutboxTransactionError,
  OutboxSchemaMissingError,
  pgConnector,
} from '../../lib/outbox';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, logEntries, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';
import { startRedisServer } from '../support/redis-server';

describe('outbox on pg', () => {
  let server: PostgresServer;
  let pool: Pool;
  let redis: Redis;
  let prefix: string;
  let tables: ReturnType<typeof uniqueTables>;
  let apps: INestApplicationContext[] = [];

  const start = async (options: { relay?: boolean; partitions?: number; redisUrl?: string; batchSize?: number } = {}) => {
    const app = await createOutboxApp(
      {
        prefix,
        partitions: options.partitions ?? 1,
        redis: options.redisUrl ?? testRedisUrl(),
        allowDegradedStart: true,
        autoStart: false,
      },
      {
        connector: pgConnector(pool),
        ...tables,
        relay: { enabled: options.relay ?? false, batchSize: options.batchSize ?? 500, retryBackoffMs: 20, retryBackoffMaxMs: 200 },
      },
    );
    apps.push(app);
    return app;
  };
  const inTransaction = async <T>(work: (client: PoolClient) => Promise<T>, commit = true): Promise<T> => {
    const client = await pool.connect();
    try {
      await client.query('begin');
      const result = await work(client);
      await client.query(commit ? 'commit' : 'rollback');
      return result;
    } catch (error) {
      await client.query('rollback');
      throw error;
    } finally {
      client.release();
    }
  };
  const rowCount = async (): Promise<number> => Number((await pool.query(`select count(*) as n from ${tables.outboxTable}`)).rows[0].n);

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
  beforeEach(async () => {
    prefix = uniquePrefix('outbox');
    tables = uniqueTables();
    await pool.query(`create table if not exists orders (id serial primary key, customer text not null)`);
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });

  it('stores one row in the caller transaction and none when it rolls back', async () => {
    const app = await start();
    const outbox = app.get(EventrailOutbox);
    const record = await inTransaction(async (client) => {
      await client.query(`insert into orders (customer) values ('c1')`);
      return outbox.publish(client, 'order.placed', { orderId: 1, items: ['a'] }, { key: 'c1', headers: { traceparent: 't' } });
    });
    await inTransaction((client) => outbox.publish(client, 'order.placed', { orderId: 2 }, { key: 'c2' }), false);
    const { rows } = await pool.query(`select * from ${tables.outboxTable} order by id`);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      event_id: record.id,
      event: 'order.placed',
      key: 'c1',
      partition: null,
      data: '{"orderId":1,"items":["a"]}',
      headers: '{"traceparent":"t"}',
      failed: null,
    });
    expect(String(rows[0].id)).toBe(record.rowId);
    expect(record.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7/);
    // Nothing went to Redis.
    expect(await redis.exists(`{${prefix}:0}:log`)).toBe(0);
  });

  it('refuses what the publisher refuses, with the same errors, and stores nothing', async () => {
    const app = await start({ partitions: 2 });
    const outbox = app.get(EventrailOutbox);
    await inTransaction(async (client) => {
      await expect(outbox.publish(client, '', {})).rejects.toThrow(InvalidEventNameError);
      await expect(outbox.publish(client, 'x', { at: new Date() })).rejects.toThrow(InvalidEventDataError);
      await expect(outbox.publish(client, 'x', { s: 'a'.repeat(2_000_000) })).rejects.toThrow(PayloadTooLargeError);
      await expect(outbox.publish(client, 'x', {}, { key: 'k', partition: 1 })).rejects.toThrow(InvalidPublishOptionsError);
      await expect(outbox.publish(client, 'x', {}, { partition: 2 })).rejects.toThrow(InvalidPublishOptionsError);
      await expect(
        outbox.publishMany(client, [
          { event: 'ok', data: 1 },
          { event: 'bad', data: undefined },
        ]),
      ).rejects.toThrow(InvalidEventDataError);
    });
    expect(await rowCount()).toBe(0);
  });

  it('refuses a pool as the transaction handle, and names a missing schema', async () => {
    const app = await start();
    const outbox = app.get(EventrailOutbox);
    await expect(outbox.publish(pool as unknown as PoolClient, 'x', {})).rejects.toThrow(InvalidOutboxTransactionError);
    await pool.query(`drop table ${tables.outboxTable}`);
    await expect(inTransaction((client) => outbox.publish(client, 'x', {}))).rejects.toThrow(OutboxSchemaMissingError);
  });

  it('refuses a PoolClient that is not inside a transaction, and stores nothing', async () => {
    const app = await start();
    const outbox = app.get(EventrailOutbox);
    const client = await pool.connect();
    try {
      // Without BEGIN the insert would autocommit: a later rollback would leave a phantom event.
      await expect(outbox.publish(client, 'x', {})).rejects.toThrow(InvalidOutboxTransactionError);
      await client.query('begin');
      await client.query('select 1 / 0').catch(() => undefined);
      await expect(outbox.publish(client, 'x', {})).rejects.toThrow(/aborted/);
      await client.query('rollback');
      await client.query('begin');
      await outbox.publish(client, 'x', {});
      await client.query('rollback');
    } finally {
      client.release();
    }
    expect(await rowCount()).toBe(0);
  });

  it('rejects bad options at startup, naming them', async () => {
    await expect(start({ batchSize: 0, relay: true })).rejects.toThrow(/outbox\.relay\.batchSize/);
    await expect(
      createOutboxApp({ prefix, autoStart: false }, { connector: pgConnector(pool), relay: { enabeld: true } } as never),
    ).rejects.toThrow(/did you mean enabled/);
    await expect(
      createOutboxApp({ prefix, autoStart: false }, { connector: pgConnector(pool), outboxTable: 'Drop Table' }),
    ).rejects.toThrow(InvalidOptionError);
    await expect(
      createOutboxApp({ prefix, autoStart: false, dedupWindowMs: 0 }, { connector: pgConnector(pool), ...tables }),
    ).rejects.toThrow(/dedupWindowMs/);
  });

  it('relays committed rows in order with their event ids, and deletes them', async () => {
    const producer = await start({ partitions: 3 });
    const outbox = producer.get(EventrailOutbox);
    const expected = new Map<string, string[]>();
    for (let t = 0; t < 10; t++) {
      const records = await inTransaction((client) =>
        outbox.publishMany(
          client,
          Array.from({ length: 7 }, (_, i) => ({ event: 'order.placed', data: { t, i }, key: `customer-${(t + i) % 4}` })),
        ),
      );
      records.forEach((r, i) => expected.set(`customer-${(t + i) % 4}`, [...(expected.get(`customer-${(t + i) % 4}`) ?? []), r.id]));
    }
    await start({ relay: true, partitions: 3, batchSize: 16 });
    await waitFor(async () => (await rowCount()) === 0, 'the relay drained the outbox');
    const byKey = new Map<string, string[]>();
    let total = 0;
    for (let p = 0; p < 3; p++) {
      for (const entry of await logEntries(redis, prefix, p)) {
        byKey.set(entry.key as string, [...(byKey.get(entry.key as string) ?? []), entry.id]);
        total++;
      }
    }
    expect(total).toBe(70);
    expect(byKey).toEqual(expected);
  });

  it('gives same-key transactions their ids in commit order (key locks)', async () => {
    const app = await start({ relay: true });
    const outbox = app.get(EventrailOutbox);
    const first = await pool.connect();
    const second = await pool.connect();
    try {
      await first.query('begin');
      await second.query('begin');
      await second.query(`insert into orders (customer) values ('early')`); // the second writes first...
      await outbox.publish(first, 'order.changed', { step: 'first' }, { key: 'k' });
      const secondPublish = outbox.publish(second, 'order.changed', { step: 'second' }, { key: 'k' });
      // ...and waits on the key's lock until the first commits.
      await waitFor(
        async () => (await pool.query(`select count(*) as n from pg_locks where locktype = 'advisory' and not granted`)).rows[0].n === '1',
        'the second transaction waits on the key lock',
      );
      await first.query('commit');
      await secondPublish;
      await second.query('commit');
    } finally {
      first.release();
      second.release();
    }
    await waitFor(async () => (await logEntries(redis, prefix)).length === 2, 'both relayed');
    expect((await logEntries(redis, prefix)).map((e) => (e.data as { step: string }).step)).toEqual(['first', 'second']);
  });

  it('keeps rows while Redis is down and relays them once it is back', async () => {
    const own = await startRedisServer();
    try {
      const app = await start({ relay: true, redisUrl: own.url });
      const outbox = app.get(EventrailOutbox);
      await inTransaction((client) => outbox.publish(client, 'a', { n: 1 }, { key: 'k' }));
      await waitFor(async () => (await rowCount()) === 0, 'the first row relayed');
      await own.stop();
      await inTransaction((client) =>
        outbox.publishMany(
          client,
          [1, 2, 3].map((n) => ({ event: 'a', data: { n: n + 1 }, key: 'k' })),
        ),
      );
      const restarted = await startRedisServer(own.port);
      try {
        await waitFor(async () => (await rowCount()) === 0, 'the rows relayed after the restart');
        const client = new Redis(restarted.url);
        const entries = await logEntries(client, prefix);
        client.disconnect();
        // A server without persistence came back empty: exactly the rows that waited.
        expect(entries.map((e) => (e.data as { n: number }).n)).toEqual([2, 3, 4]);
      } finally {
        await restarted.stop();
      }
    } finally {
      await own.stop();
    }
  });

  it('takes a new session and goes on when its database session is killed', async () => {
    const app = await start({ relay: true });
    const relay = app.get(EventrailOutboxRelay);
    await waitFor(() => relay.isActive(), 'the relay is active');
    const outbox = app.get(EventrailOutbox);
    await inTransaction((client) => outbox.publish(client, 'a', { n: 1 }));
    await waitFor(async () => (await rowCount()) === 0, 'the first row relayed');
    // What a database restart or a network cut does to the relay's connection (and its lock).
    const killed = await pool.query(`select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory' and granted`);
    expect(killed.rowCount).toBe(1);
    await waitFor(() => relay.stats().takeovers === 2 && relay.isActive(), 'the relay took the lock again on a new session');
    await inTransaction((client) => outbox.publish(client, 'a', { n: 2 }));
    await waitFor(async () => (await rowCount()) === 0, 'the second row relayed');
    expect((await logEntries(redis, prefix)).map((e) => (e.data as { n: number }).n)).toEqual([1, 2]);
  });

  it('has one active relay per log and table; another takes over when it stops', async () => {
    const first = await start({ relay: true });
    await waitFor(() => first.get(EventrailOutboxRelay).isActive(), 'the first relay is active');
    const second = await start({ relay: true });
    const outbox = second.get(EventrailOutbox);
    await inTransaction((client) => outbox.publish(client, 'a', { n: 1 }));
    await waitFor(async () => (await rowCount()) === 0, 'relayed by the first');
    expect(second.get(EventrailOutboxRelay).isActive()).toBe(false);
    await first.close();
    apps = apps.filter((app) => app !== first);
    await waitFor(() => second.get(EventrailOutboxRelay).isActive(), 'the second relay took over');
    await inTransaction((client) => outbox.publish(client, 'a', { n: 2 }));
    await waitFor(async () => (await rowCount()) === 0, 'relayed by the second');
    expect((await logEntries(redis, prefix)).map((e) => (e.data as { n: number }).n)).toEqual([1, 2]);
    expect(second.get(EventrailOutboxRelay).stats()).toMatchObject({ active: true, relayed: 1, takeovers: 1 });
  });
});
