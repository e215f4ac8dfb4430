import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { Pool, PoolClient } from 'pg';
import { EventrailAdmin, EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailInbox, OutboxSchemaMissingError, pgConnector } from '../../lib/outbox';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';

const calls: Array<{ id: string; attempt: number }> = [];
const failFirstAttempt = new Set<number>();

@Injectable()
class Billing {
  constructor(private readonly inbox: EventrailInbox) {}

  @OnEvent('order.placed', { group: 'billing', retryBackoffMs: 5, retryBackoffMaxMs: 20 })
  async bill(message: EventrailMessage<{ order: number }>): Promise<void> {
    calls.push({ id: message.id, attempt: message.attempt });
    await this.inbox.handle<void, PoolClient>(message, async (tx) => {
      await tx.query('insert into invoices (order_id) values ($1)', [message.data.order]);
      if (failFirstAttempt.has(message.data.order) && message.attempt === 1) throw new Error('billing is flaky');
    });
  }
}

describe('inbox with a consumer group', () => {
  let server: PostgresServer;
  let pool: Pool;
  let redis: Redis;
  let prefix: string;
  let tables: ReturnType<typeof uniqueTables>;
  let app: INestApplicationContext | undefined;
  const invoices = async (): Promise<number[]> =>
    (await pool.query('select order_id from invoices order by order_id')).rows.map((row: { order_id: number }) => row.order_id);

  beforeAll(async () => {
    server = await startPostgres();
    pool = new Pool({ connectionString: await server.createDatabase() });
    redis = new Redis(testRedisUrl());
  });
  afterAll(async () => {
    await pool?.end();
    redis?.disconnect();
    await server?.stop();
  });
  beforeEach(async () => {
    prefix = uniquePrefix('inbox');
    tables = uniqueTables();
    calls.length = 0;
    failFirstAttempt.clear();
    await pool.query('drop table if exists invoices; create table invoices (order_id int not null)');
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });

  const start = async (): Promise<INestApplicationContext> =>
    createOutboxApp({ prefix }, { connector: pgConnector(pool), ...tables, relay: { enabled: false } }, [Billing]);

  it('makes effects exactly-once across a failed attempt and a full replay', async () => {
    app = await start();
    await app.get(EventrailConsumers).whenRunning();
    failFirstAttempt.add(2);
    await app.get(EventrailPublisher).publishMany([1, 2, 3].map((order) => ({ event: 'order.placed', data: { order } })));
    await waitFor(async () => (await invoices()).length === 3, 'three invoices');
    // The failed attempt rolled its invoice back; the retry wrote it once.
    expect(await invoices()).toEqual([1, 2, 3]);
    expect(calls.filter((call) => call.attempt === 2)).toHaveLength(1);

    // Redeliver everything: the handler runs again, the inbox skips every effect.
    await app.get(EventrailAdmin).resetOffsets('billing', 'start', { force: true });
    await waitFor(() => app!.get(EventrailInbox).stats().skippedDuplicates === 3, 'three redeliveries skipped');
    expect(await invoices()).toEqual([1, 2, 3]);
    expect(Number((await pool.query(`select count(*) as n from ${tables.inboxTable} where group_name = 'billing'`)).rows[0].n)).toBe(3);
  });

  it('prunes rows older than the retention window', async () => {
    app = await start();
    const inbox = app.get(EventrailInbox);
    await pool.query(
      `insert into ${tables.inboxTable} (group_name, event_id, handled_at) values ('g', 'old', now() - interval '8 days'), ('g', 'new', now())`,
    );
    expect(await inbox.prune()).toBe(1);
    expect((await pool.query(`select event_id from ${tables.inboxTable}`)).rows).toEqual([{ event_id: 'new' }]);
  });

  it('names a missing inbox table', async () => {
    app = await start();
    await pool.query(`drop table ${tables.inboxTable}`);
    await expect(app.get(EventrailInbox).handle({ group: 'g', id: 'x' }, async () => undefined)).rejects.toThrow(OutboxSchemaMissingError);
  });
});
