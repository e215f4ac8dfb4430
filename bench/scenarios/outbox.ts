import { INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { EventrailModule, EventrailPublisher, PublishInput } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailOutbox, EventrailOutboxModule, EventrailOutboxRelay, pgConnector } from '../../lib/outbox';
import { postgresInstalled, PostgresServer, startPostgres } from '../../test/support/postgres';
import { uniqueTables } from '../../test/support/outbox';
import { BENCH_EVENT, hostNow, PAYLOAD } from '../support/payload';
import { Measurement, MetricSpec, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { percentile, perSecond } from '../support/stats';

/** The relay's batch size, and the reference's `publishMany` batch: the same number of events per round trip. */
const BATCH = 500;
const LATENCY_RATE = 1000;

const ms = (key: string): MetricSpec => ({ key, unit: 'ms', digits: 2 });

/**
 * The outbox relay against `publishMany` into the same Redis. Starts a
 * throwaway PostgreSQL 15 (test/support/postgres.ts) on first use; skipped
 * with a message when it is not installed.
 */
export function outboxRelay(size: Size): Scenario {
  const events = size === 'quick' ? 2_000 : 100_000;
  const base = { id: 'outbox-relay', metrics: [RATE], rounds: size === 'quick' ? 1 : 7, warmup: true };
  if (!postgresInstalled()) return skipped(base, 'Outbox relay');
  return {
    ...base,
    title: `Outbox relay: ${events} committed rows to the log, batches of ${BATCH}`,
    variants: [
      { id: 'relay', label: 'outbox relay: committed rows to the log', events, run: (ctx) => relayThroughput(ctx, events) },
      {
        id: 'raw-relay',
        label: 'raw relay: delete-and-read statement, multi-XADD script (no failed rows, no byte bounds, no dedup)',
        events,
        run: (ctx) => rawRelayThroughput(ctx, events),
      },
      { id: 'publishMany', label: '`publishMany`, 500 a call', events, run: (ctx) => publishManyRate(ctx, events, false) },
      {
        id: 'publishMany-ids',
        label: '`publishMany` with ids and dedup, 500 a call',
        events,
        run: (ctx) => publishManyRate(ctx, events, true),
      },
    ],
    targets: [
      { label: 'relay / `publishMany` (rows/s)', variant: 'relay', reference: 'publishMany', metric: 'rate', atLeast: 0.5 },
      { label: 'relay / `publishMany` with ids and dedup (rows/s)', variant: 'relay', reference: 'publishMany-ids', metric: 'rate' },
      { label: 'relay / the raw relay (rows/s)', variant: 'relay', reference: 'raw-relay', metric: 'rate' },
      { label: 'the raw relay / `publishMany` (rows/s)', variant: 'raw-relay', reference: 'publishMany', metric: 'rate' },
    ],
  };
}

/** Commit-to-log latency at 1000 rows/s (one row per transaction), the relay woken by NOTIFY. */
export function outboxLatency(size: Size): Scenario {
  const latencyMs = size === 'quick' ? 500 : 5_000;
  const base = { id: 'outbox-latency', metrics: [ms('p50'), ms('p99'), ms('max')], rounds: size === 'quick' ? 1 : 3, warmup: false };
  if (!postgresInstalled()) return skipped(base, 'Outbox commit-to-log latency');
  return {
    ...base,
    title: `Outbox commit-to-log latency at ${LATENCY_RATE} rows/s (one row per transaction, NOTIFY)`,
    variants: [
      {
        id: 'latency',
        label: 'COMMIT resolved to XREAD BLOCK reply',
        events: (LATENCY_RATE * latencyMs) / 1000,
        run: (ctx) => commitToLog(ctx, latencyMs),
      },
    ],
    targets: [
      { label: 'commit-to-log latency p50 (ms)', variant: 'latency', metric: 'p50', atMost: 5 },
      { label: 'commit-to-log latency p99 (ms)', variant: 'latency', metric: 'p99' },
    ],
  };
}

function skipped(base: Pick<Scenario, 'id' | 'metrics' | 'rounds' | 'warmup'>, what: string): Scenario {
  console.log(`${base.id} scenario skipped: PostgreSQL is not installed (apt-get install postgresql)`);
  return { ...base, title: `${what} (skipped: PostgreSQL not installed)`, variants: [], targets: [] };
}

let server: Promise<{ server: PostgresServer; url: string }> | undefined;
/** One cluster for the whole bench run (stopped when the process exits); every run uses tables of its own. */
function database(): Promise<{ server: PostgresServer; url: string }> {
  server ??= startPostgres().then(async (started) => ({ server: started, url: await started.createDatabase('bench') }));
  return server;
}

interface OutboxApp {
  app: INestApplicationContext;
  pool: Pool;
  outboxTable: string;
  close(): Promise<void>;
}

async function createOutboxApp(ctx: RunContext, relay: boolean): Promise<OutboxApp> {
  const { url } = await database();
  const pool = new Pool({ connectionString: url, max: 8 });
  const tables = uniqueTables();
  @Module({
    imports: [
      EventrailModule.forRoot({ redis: ctx.url, prefix: ctx.prefix, dedupWindowMs: 600_000, autoStart: false }),
      EventrailOutboxModule.forRoot({
        connector: pgConnector(pool),
        ...tables,
        ensureSchema: true,
        relay: { enabled: relay, batchSize: BATCH },
        inbox: { pruneIntervalMs: 0 },
      }),
    ],
  })
  class OutboxBenchModule {}
  const app = await NestFactory.createApplicationContext(OutboxBenchModule, { logger: ['error'], abortOnError: false });
  if (relay) await until(() => app.get(EventrailOutboxRelay).isActive());
  return {
    app,
    pool,
    outboxTable: tables.outboxTable,
    async close() {
      await app.close();
      await pool.end();
    },
  };
}

/** `events` outbox rows written through `EventrailOutbox.publishMany` and committed in one transaction. */
async function fillOutbox(app: INestApplicationContext, pool: Pool, events: number): Promise<void> {
  const outbox = app.get(EventrailOutbox);
  const client = await pool.connect();
  try {
    await client.query('begin');
    for (let from = 0; from < events; from += 1000) {
      await outbox.publishMany(
        client,
        Array.from({ length: Math.min(1000, events - from) }, () => ({ event: BENCH_EVENT, data: PAYLOAD })),
      );
    }
    await client.query('commit');
  } finally {
    client.release();
  }
}

/** Rows committed in one transaction before the clock starts; timed from the commit to the relay's last append. */
async function relayThroughput(ctx: RunContext, events: number): Promise<Measurement> {
  const { app, pool, close } = await createOutboxApp(ctx, true);
  try {
    const relay = app.get(EventrailOutboxRelay);
    await fillOutbox(app, pool, events);
    const started = performance.now();
    await until(() => relay.stats().relayed >= events);
    const rate = perSecond(relay.stats().relayed, performance.now() - started);
    const done = await ctx.admin.xlen(new EventrailKeys(ctx.prefix, 1).stream(0));
    return { metrics: { rate }, expected: events, done };
  } finally {
    await close();
  }
}

/** XADD of runs of entries with the fields a relayed row's entry has (id, event, time, data), 8 arguments each. */
const RAW_RELAY_XADD = `
local ids = {}
local n = 0
for i = 1, #ARGV, 8 do
  n = n + 1
  ids[n] = redis.call('XADD', KEYS[1], '*', ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7])
end
return ids`;
const RAW_RUN = 125;

/**
 * The floor of a relay on this host: what a skilled engineer writes with `pg` and ioredis to move the
 * same committed rows to the same stream, at least once. One statement deletes the rows Redis acknowledged
 * last and reads the next batch after the last id read (rows as arrays, `data` passed through as stored;
 * a row committed late with a lower id would be skipped: here every row is committed before it starts);
 * it runs while the batch before is appended, in runs of 125 entries per script call, as sent. It has none
 * of the relay's duties: no failed rows (a row that cannot be appended stops it), no byte bounds, no
 * log ownership, no dedup of a row appended twice after a crash, no lock against a second relay.
 */
async function rawRelayThroughput(ctx: RunContext, events: number): Promise<Measurement> {
  const { app, pool, outboxTable, close } = await createOutboxApp(ctx, false);
  const redis = new Redis(ctx.url) as Redis & { rawRelayXadd(key: string, ...args: string[]): Promise<string[]> };
  redis.defineCommand('rawRelayXadd', { numberOfKeys: 1, lua: RAW_RELAY_XADD });
  const stream = new EventrailKeys(ctx.prefix, 1).stream(0);
  const client = await pool.connect();
  try {
    await fillOutbox(app, pool, events);
    await redis.ping();
    const text = `with gone as (delete from ${outboxTable} where id = any($1::bigint[]))
      select id, event_id, event, data from ${outboxTable} where id > $2 order by id limit ${BATCH}`;
    const read = (deleting: string[], after: string): Promise<string[][]> =>
      client.query<string[]>({ text, values: [deleting, after], rowMode: 'array' }).then((result) => result.rows);
    const append = (rows: string[][]): Promise<string[][]> => {
      const now = String(Date.now());
      const calls: Array<Promise<string[]>> = [];
      for (let from = 0; from < rows.length; from += RAW_RUN) {
        const args: string[] = [];
        for (const [, eventId, event, data] of rows.slice(from, from + RAW_RUN))
          args.push('id', eventId, 'event', event, 'time', now, 'data', data);
        calls.push(redis.rawRelayXadd(stream, ...args));
      }
      return Promise.all(calls);
    };
    let relayed = 0;
    /** Appended and acknowledged, deleted by the next read. */
    let acknowledged: string[] = [];
    const started = performance.now();
    let rows = await read([], '0');
    while (rows.length > 0) {
      const appending = append(rows);
      // The next batch is read while this one is appended; the statement deletes the batch before this one.
      const next = read(acknowledged, rows[rows.length - 1][0]);
      await appending;
      relayed += rows.length;
      acknowledged = rows.map((row) => row[0]);
      rows = await next;
    }
    // Timed as the relay is: to its last acknowledged append (its last delete is not timed either).
    const rate = perSecond(relayed, performance.now() - started);
    await client.query(`delete from ${outboxTable} where id = any($1::bigint[])`, [acknowledged]);
    return { metrics: { rate }, expected: events, done: await ctx.admin.xlen(stream) };
  } finally {
    client.release();
    redis.disconnect();
    await close();
  }
}

/** The reference: the same events straight from `publishMany`, in batches of the relay's size. */
async function publishManyRate(ctx: RunContext, events: number, ids: boolean): Promise<Measurement> {
  const { app, close } = await createOutboxApp(ctx, false);
  try {
    const publisher = app.get(EventrailPublisher);
    let done = 0;
    let n = 0;
    const started = performance.now();
    for (let from = 0; from < events; from += BATCH) {
      const batch: PublishInput[] = Array.from({ length: Math.min(BATCH, events - from) }, () => ({
        event: BENCH_EVENT,
        data: PAYLOAD,
        ...(ids ? { id: `bench-${ctx.prefix}-${n++}` } : {}),
      }));
      done += (await publisher.publishMany(batch)).length;
    }
    return { metrics: { rate: perSecond(done, performance.now() - started) }, expected: events, done };
  } finally {
    await close();
  }
}

/**
 * One row per transaction at a steady rate; latency from the resolved COMMIT
 * to the entry's arrival at a raw `XREAD BLOCK` reader (the same process, so
 * one clock).
 */
async function commitToLog(ctx: RunContext, durationMs: number): Promise<Measurement> {
  const { app, pool, close } = await createOutboxApp(ctx, true);
  const reader = new Redis(ctx.url);
  try {
    const outbox = app.get(EventrailOutbox);
    const stream = new EventrailKeys(ctx.prefix, 1).stream(0);
    const expected = (LATENCY_RATE * durationMs) / 1000;
    const committedAt = new Map<string, number>();
    const arrivedAt = new Map<string, number>();
    const reading = (async () => {
      let last = '$';
      while (arrivedAt.size < expected) {
        const reply = (await reader.xread('COUNT', 1000, 'BLOCK', 2000, 'STREAMS', stream, last)) as Array<
          [string, Array<[string, string[]]>]
        > | null;
        const now = hostNow();
        for (const [, entries] of reply ?? []) {
          for (const [offset, fields] of entries) {
            last = offset;
            arrivedAt.set(fields[fields.indexOf('id') + 1], now);
          }
        }
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 100)); // the blocking read is in place
    const started = performance.now();
    const inFlight: Array<Promise<void>> = [];
    for (let i = 0; i < expected; i++) {
      const due = started + (i * 1000) / LATENCY_RATE;
      const wait = due - performance.now();
      if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
      inFlight.push(
        (async () => {
          const client = await pool.connect();
          try {
            await client.query('begin');
            const { id } = await outbox.publish(client, BENCH_EVENT, PAYLOAD, { key: `customer-${i % 64}` });
            await client.query('commit');
            committedAt.set(id, hostNow());
          } finally {
            client.release();
          }
        })(),
      );
    }
    await Promise.all(inFlight);
    await Promise.race([reading, new Promise((resolve) => setTimeout(resolve, 30_000))]);
    const latencies = [...committedAt].flatMap(([id, at]) => (arrivedAt.has(id) ? [Math.max(0, (arrivedAt.get(id) as number) - at)] : []));
    latencies.sort((a, b) => a - b);
    return {
      metrics: { p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: latencies[latencies.length - 1] ?? 0 },
      expected,
      done: latencies.length,
    };
  } finally {
    reader.disconnect();
    await close();
  }
}

async function until(predicate: () => boolean): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error('outbox bench: timed out');
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}
