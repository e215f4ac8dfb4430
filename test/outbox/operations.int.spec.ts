import { INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TerminusModule } from '@nestjs/terminus';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { Registry } from 'prom-client';
import { EventrailMetrics, EventrailModule, InvalidOptionError } from '../../lib';
import { EventrailHealthIndicator, EventrailHealthModule } from '../../lib/health';
import { EventrailOutbox, EventrailOutboxAdmin, EventrailOutboxModule, pgConnector } from '../../lib/outbox';
import { createPrometheusMetrics } from '../../lib/prometheus';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';

/** Outbox depth and age in the outbox admin, the health indicator (maxOutboxAgeMs) and the metrics hooks. */
describe('outbox operations', () => {
  let server: PostgresServer;
  let pool: Pool;
  let redis: Redis;
  let prefix: string;
  let tables: ReturnType<typeof uniqueTables>;
  let app: INestApplicationContext | undefined;

  const boot = async (relay: boolean, metrics: EventrailMetrics = {}): Promise<INestApplicationContext> => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({ redis: testRedisUrl(), prefix, dedupWindowMs: 60_000, metrics }),
        EventrailOutboxModule.forRoot({
          connector: pgConnector(pool),
          ...tables,
          ensureSchema: true,
          relay: { enabled: relay, pollIntervalMs: 50 },
        }),
        TerminusModule,
        EventrailHealthModule,
      ],
    }).compile();
    app = await moduleRef.init();
    return app;
  };
  const health = async (maxOutboxAgeMs: number) =>
    (await app!.get(EventrailHealthIndicator).isHealthy('eventrail', { maxOutboxAgeMs })).eventrail as {
      status: string;
      message?: string;
      outbox: { depth: number; oldestAgeMs: number | null } | null;
    };

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
  beforeEach(() => {
    prefix = uniquePrefix('obops');
    tables = uniqueTables();
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });

  it('reports depth and the oldest row, and the health check goes down past maxOutboxAgeMs', async () => {
    await boot(false);
    const admin = app!.get(EventrailOutboxAdmin);
    expect(await admin.status()).toMatchObject({
      table: tables.outboxTable,
      depth: 0,
      failed: 0,
      oldestAgeMs: null,
      relay: { enabled: false },
    });
    expect(await health(60_000)).toMatchObject({ status: 'up', outbox: { depth: 0, oldestAgeMs: null } });
    await pool.query(
      `insert into ${tables.outboxTable} (event_id, event, data, created_at) values ('a', 'e', '1', now() - interval '2 minutes'), ('b', 'e', '2', now())`,
    );
    const status = await admin.status();
    expect(status).toMatchObject({ depth: 2, failed: 0 });
    expect(status.oldestAgeMs).toBeGreaterThanOrEqual(120_000);
    const down = await health(60_000);
    expect(down.status).toBe('down');
    expect(down.message).toMatch(/^outbox: oldest row waits \d+ ms, over 60000$/);
    expect((await health(3_600_000)).status).toBe('up');
  });

  it('is up again once a relay drained the table, and feeds the Prometheus metrics', async () => {
    const registry = new Registry();
    await boot(true, createPrometheusMetrics({ registry }));
    const outbox = app!.get(EventrailOutbox);
    const client = await pool.connect();
    try {
      await client.query('begin');
      await outbox.publishMany(
        client,
        [1, 2, 3].map((n) => ({ event: 'e', data: { n } })),
      );
      await client.query('commit');
    } finally {
      client.release();
    }
    await waitFor(
      async () => (await health(1_000)).status === 'up' && (await app!.get(EventrailOutboxAdmin).status()).depth === 0,
      'drained',
    );
    await waitFor(async () => (await registry.getSingleMetricAsString('eventrail_outbox_relayed_total')).includes(' 3'), 'relayed counted');
    const text = await registry.metrics();
    expect(text).toContain(`eventrail_outbox_relayed_total{table="${tables.outboxTable}"} 3`);
    expect(text).toContain(`eventrail_outbox_duplicates_total{table="${tables.outboxTable}"} 0`);
    await waitFor(
      async () => (await registry.metrics()).includes(`eventrail_outbox_depth{table="${tables.outboxTable}"} 0`),
      'the depth gauge sampled',
    );
  });

  it('refuses maxOutboxAgeMs without the outbox module', async () => {
    app = await createApp({ prefix }, [], [TerminusModule, EventrailHealthModule]);
    await expect(app.get(EventrailHealthIndicator).isHealthy('eventrail', { maxOutboxAgeMs: 1 })).rejects.toThrow(InvalidOptionError);
  });
});
