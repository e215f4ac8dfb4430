import 'reflect-metadata';
import { join } from 'node:path';
import { INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { EventrailModule, EventrailPublisher } from '../../lib';
import { EventrailOutbox, EventrailOutboxModule, pgConnector } from '../../lib/outbox';
import { EventrailKeys } from '../../lib/redis/keys';
import { RawEntry, readEntry } from '../../lib/wire/codec';
import { decodeDeadLetter } from '../../lib/wire/dead-letter.codec';
import type { PostgresServer } from '../support/postgres';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { hasParkedLines, offsetsCoverLog } from './support/log-checks';
import { Supervisor } from './support/supervisor';
import { checkDatabaseRun, DatabaseLogEntry, DatabaseRunRecord, DatabaseViolation } from './database-invariants';
import {
  DATABASE_FAULT_KINDS,
  databaseKeys,
  DatabaseFaultKind,
  DatabaseSchedule,
  DatabaseStep,
  DB_EVENT,
  DB_GROUP,
  WORKER_APP,
} from './database-schedule';
import { OffsetSampler } from './offset-sampler';

const WORKER_FILE = join(__dirname, 'support', 'inbox-worker.ts');
/** Generous: on a loaded host a worker (swc, Nest, the outbox schema) takes tens of seconds to start. */
const READY_TIMEOUT_MS = 120_000;
/** After a restart, handles fail and retry (backoff up to 200 ms, for up to maxRetryAgeMs) while the database comes back, and workers restart: a drain can take a while. */
const DRAIN_TIMEOUT_MS = 90_000;
/** How long a kill waits for its slot's worker to be ready, and a terminate-handler for a transaction to hit. */
const WORKER_WAIT_MS = 20_000;
const TRANSACTION_WAIT_MS = 1_000;

/** What one database schedule did, and what the checks found. */
export interface DatabaseRunFigures {
  seed: number;
  ms: number;
  published: number;
  accepted: number;
  /** Publishes that failed (outbox transactions that did not commit, as far as the publisher could tell). */
  rejected: number;
  logEntries: number;
  effects: number;
  /** Inbox handles that rejected (and were retried), and redeliveries the inbox skipped. */
  failedHandles: number;
  duplicates: number;
  /** Backends ended by `pg_terminate_backend`, and how many of them were inside an inbox transaction. */
  terminated: number;
  midTransaction: number;
  faults: Record<DatabaseFaultKind, number>;
  skipped: string[];
  violations: DatabaseViolation[];
  record?: DatabaseRunRecord;
}

/**
 * Runs one database schedule on `postgres` (a cluster of the caller's, in a
 * database of the schedule's own) and the test Redis, under a prefix of its
 * own: starts the inbox workers under a supervisor, takes the steps, waits for
 * the relay to empty the outbox and the group to catch up, checks the
 * invariants, and stops everything it started.
 */
export async function runDatabaseSchedule(postgres: PostgresServer, schedule: DatabaseSchedule): Promise<DatabaseRunFigures> {
  const began = Date.now();
  const redisUrl = testRedisUrl();
  const prefix = uniquePrefix(`dbfuzz-${schedule.seed}`);
  const keys = new EventrailKeys(prefix, schedule.partitions);
  const redis = new Redis(redisUrl);
  const databaseUrl = await postgres.createDatabase(`dbfuzz_${schedule.seed}_${Date.now()}`);
  const pool = new Pool({ connectionString: databaseUrl, max: 6, connectionTimeoutMillis: 5_000 });
  await pool.query(
    'create table fuzz_effects (seq bigserial primary key, event_id text not null, key text not null, n int not null, pid int not null)',
  );
  const config = { mode: 'fuzz' as const, redisUrl, prefix, partitions: schedule.partitions, consumer: schedule.consumer };
  const supervisor = new Supervisor(config, schedule.workers, { file: WORKER_FILE, env: { DBFUZZ_DATABASE_URL: databaseUrl } });
  const sampler = new OffsetSampler(redisUrl, keys, [DB_GROUP]);
  const state = new DatabaseRunState();
  let app: INestApplicationContext | undefined;
  try {
    app = await createPublisherApp(redisUrl, prefix, schedule.partitions, pool);
    supervisor.start();
    await waitFor(
      () => supervisor.readyChildren().length === schedule.workers,
      () => `${schedule.workers} inbox workers ready:\n${supervisor.describe()}`,
      READY_TIMEOUT_MS,
    );
    sampler.start();
    const steps = new DatabaseStepRunner(schedule, state, postgres, supervisor, app, pool);
    for (const [index, step] of schedule.steps.entries()) await steps.run(index, step);
    const drainFailure = await drain(redis, keys, pool, supervisor);
    await sampler.stop();
    await supervisor.stop();
    const record = await collect(redis, keys, pool, state, sampler, supervisor, drainFailure);
    const violations = checkDatabaseRun(record);
    const [failed, duplicates] = await redis.mget(databaseKeys.failed(prefix), databaseKeys.duplicates(prefix));
    return {
      seed: schedule.seed,
      ms: Date.now() - began,
      published: state.accepted.length + state.rejected,
      accepted: state.accepted.length,
      rejected: state.rejected,
      logEntries: record.log.flat().length,
      effects: record.effects.length,
      failedHandles: Number(failed ?? 0),
      duplicates: Number(duplicates ?? 0),
      terminated: state.terminated,
      midTransaction: state.midTransaction,
      faults: state.faults,
      skipped: state.skipped,
      violations,
      ...(violations.length > 0 ? { record } : {}),
    };
  } finally {
    await sampler.stop().catch(() => undefined);
    await supervisor.stop();
    await app?.close().catch(() => undefined);
    await pool.end().catch(() => undefined);
    await deletePrefix(redis, prefix).catch(() => undefined);
    redis.disconnect();
  }
}

class DatabaseRunState {
  readonly accepted: Array<{ n: number; id: string }> = [];
  rejected = 0;
  terminated = 0;
  midTransaction = 0;
  readonly faults = Object.fromEntries(DATABASE_FAULT_KINDS.map((k) => [k, 0])) as Record<DatabaseFaultKind, number>;
  readonly skipped: string[] = [];
}

class DatabaseStepRunner {
  private readonly publisher: EventrailPublisher;
  private readonly outbox: EventrailOutbox;

  constructor(
    private readonly schedule: DatabaseSchedule,
    private readonly state: DatabaseRunState,
    private readonly postgres: PostgresServer,
    private readonly supervisor: Supervisor,
    app: INestApplicationContext,
    private readonly pool: Pool,
  ) {
    this.publisher = app.get(EventrailPublisher);
    this.outbox = app.get(EventrailOutbox);
  }

  async run(index: number, step: DatabaseStep): Promise<void> {
    switch (step.kind) {
      case 'publish':
        return this.publish(step.events, step.via);
      case 'pause':
        return new Promise((resolve) => setTimeout(resolve, step.ms));
      case 'terminate-handler':
        return this.terminate(index, 'handler');
      case 'terminate-all':
        return this.terminate(index, 'all');
      case 'restart-postgres':
        await this.postgres.restart(step.mode);
        this.state.faults[step.kind]++;
        return;
      case 'kill-worker': {
        const find = (): ReturnType<Supervisor['readyChildren']>[number] | undefined =>
          this.supervisor.readyChildren().find((c) => c.slot === step.slot);
        const child = await waitFor(find, `a ready worker in slot ${step.slot}`, WORKER_WAIT_MS).catch(() => undefined);
        if (!child?.kill()) return void this.state.skipped.push(`#${index} kill-worker: no ready worker in slot ${step.slot}`);
        this.state.faults[step.kind]++;
        return;
      }
    }
  }

  private async publish(numbers: number[], via: 'publish' | 'outbox'): Promise<void> {
    const inputs = numbers.map((n) => ({ event: DB_EVENT, data: { n }, key: this.schedule.events[n].key }));
    try {
      const ids = via === 'publish' ? await this.publisher.publishMany(inputs) : await this.inOutboxTransaction(inputs);
      ids.forEach(({ id }, i) => this.state.accepted.push({ n: numbers[i], id }));
    } catch {
      // The database went away under the transaction: these rows may or may not be there; if they are, they count as log entries.
      this.state.rejected += numbers.length;
    }
  }

  private async inOutboxTransaction(inputs: Array<{ event: string; data: unknown; key: string }>): Promise<Array<{ id: string }>> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query('begin');
      const records = await this.outbox.publishMany(client, inputs);
      await client.query('commit');
      return records;
    } catch (error) {
      await client.query('rollback').catch((rollbackError: Error) => (broken = rollbackError));
      throw error;
    } finally {
      client.release(broken);
    }
  }

  /**
   * `handler`: waits for a worker backend inside an inbox transaction (its last statement touched the
   * inbox or the effects) and terminates it; `all`: terminates every worker backend, the relay's too.
   */
  private async terminate(index: number, target: 'handler' | 'all'): Promise<void> {
    const inInbox = `xact_start is not null and query ~ '(eventrail_inbox|fuzz_effects|pg_sleep)'`;
    const where = target === 'handler' ? `application_name = $1 and ${inInbox}` : 'application_name = $1';
    const sql = `select pid, (${inInbox}) as in_inbox, pg_terminate_backend(pid) as ended from pg_stat_activity where ${where} limit ${target === 'handler' ? 1 : 1000}`;
    const deadline = Date.now() + TRANSACTION_WAIT_MS;
    for (;;) {
      const { rows } = await this.pool.query<{ in_inbox: boolean; ended: boolean }>(sql, [WORKER_APP]);
      const ended = rows.filter((r) => r.ended);
      if (ended.length > 0 || Date.now() > deadline) {
        this.state.terminated += ended.length;
        this.state.midTransaction += ended.filter((r) => r.in_inbox).length;
        if (ended.length > 0) this.state.faults[target === 'handler' ? 'terminate-handler' : 'terminate-all']++;
        else
          this.state.skipped.push(
            `#${index} terminate-${target}: no worker backend ${target === 'handler' ? 'in an inbox transaction ' : ''}within ${TRANSACTION_WAIT_MS} ms`,
          );
        return;
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
}

/** The test's own app: publisher and outbox (no relay, no handlers). Library logs off (the figures say what happened). */
async function createPublisherApp(url: string, prefix: string, partitions: number, pool: Pool): Promise<INestApplicationContext> {
  @Module({
    imports: [
      EventrailModule.forRoot({ redis: url, prefix, partitions, dedupWindowMs: 600_000 }),
      EventrailOutboxModule.forRoot({
        connector: pgConnector(pool),
        ensureSchema: true,
        relay: { enabled: false },
        inbox: { pruneIntervalMs: 0 },
      }),
    ],
  })
  class DatabaseFuzzPublisherModule {}
  return NestFactory.createApplicationContext(DatabaseFuzzPublisherModule, { logger: false });
}

/**
 * Waits until the outbox is empty, the group's offsets reach the end of every
 * partition and no line is parked (the group's default ordering is 'key': a
 * message that failed through a PostgreSQL restart is parked and the offset
 * moves past it); returns why not, on a timeout.
 */
async function drain(redis: Redis, keys: EventrailKeys, pool: Pool, supervisor: Supervisor): Promise<string | undefined> {
  try {
    await waitFor(
      async () =>
        (await outboxLeft(pool)) === 0 && (await offsetsCoverLog(redis, keys, DB_GROUP)) && !(await hasParkedLines(redis, keys, DB_GROUP)),
      'the outbox empty, the group at the end of the log, nothing parked',
      DRAIN_TIMEOUT_MS,
      100,
    );
    return undefined;
  } catch (error) {
    const tails = supervisor.children.slice(-supervisor.slots).map((c) => c.describe());
    return `${String(error)}\n${tails.join('\n---\n')}`;
  }
}

async function outboxLeft(pool: Pool): Promise<number> {
  return Number((await pool.query<{ n: string }>('select count(*) as n from eventrail_outbox')).rows[0].n);
}

async function collect(
  redis: Redis,
  keys: EventrailKeys,
  pool: Pool,
  state: DatabaseRunState,
  sampler: OffsetSampler,
  supervisor: Supervisor,
  drainFailure: string | undefined,
): Promise<DatabaseRunRecord> {
  const log: DatabaseLogEntry[][] = [];
  for (let p = 0; p < keys.partitions; p++) {
    const entries = await redis.xrange(keys.stream(p), '-', '+');
    log.push(
      entries.map(([offset, list]) => {
        const { id, key, data } = readEntry(offset, list, { partition: p, logTag: keys.logTag }) as RawEntry;
        return { partition: p, offset, id, key: key ?? '', n: (JSON.parse(data) as { n: number }).n };
      }),
    );
  }
  const { rows: effects } = await pool.query<{ seq: string; event_id: string; key: string }>(
    'select seq, event_id, key from fuzz_effects order by seq',
  );
  const letters = (await redis.xrange(keys.deadLetters(DB_GROUP), '-', '+')).map(([id, fields]) => decodeDeadLetter(id, fields));
  const { rows: inbox } = await pool.query<{ event_id: string }>('select event_id from eventrail_inbox where group_name = $1', [DB_GROUP]);
  // A worker still starting while PostgreSQL restarted fails its startup and the supervisor starts another: noted, not a violation.
  const restarts = state.faults['restart-postgres'] + state.faults['terminate-all'] > 0;
  const failedStartups = supervisor.unexpectedExits.filter((e) => restarts && !e.wasReady);
  for (const e of failedStartups) state.skipped.push(`worker ${e.pid} in slot ${e.slot} failed its startup during a database fault`);
  const unexpectedExits = [...supervisor.unexpectedExits.filter((e) => !failedStartups.includes(e)), ...supervisor.crashes].map(
    (e) =>
      `worker exit not caused by the test: ${JSON.stringify(e)}\n${supervisor.children.find((c) => c.pid === e.pid)?.describe() ?? ''}`,
  );
  return {
    accepted: state.accepted,
    log,
    effects: effects.map((r) => ({ seq: Number(r.seq), eventId: r.event_id, key: r.key })),
    inbox: inbox.map((r) => r.event_id),
    deadLetters: letters.map((d) => ({
      eventId: d.eventId,
      reason: d.reason,
      error: `${d.error.name}: ${d.error.message}`,
      attempts: d.attempts,
    })),
    outboxLeft: await outboxLeft(pool),
    backwardMoves: sampler.backwardMoves([]),
    unexpectedExits,
    ...(drainFailure ? { drainFailure } : {}),
  };
}

/** Sums over every run, and one line per run. */
export function describeDatabaseRuns(runs: readonly DatabaseRunFigures[]): string {
  const sum = (f: (r: DatabaseRunFigures) => number): number => runs.reduce((s, r) => s + f(r), 0);
  const violating = runs.filter((r) => r.violations.length > 0);
  return [
    `${runs.length} database schedules in ${Math.round(sum((r) => r.ms) / 1000)} s: ${sum((r) => r.published)} events published ` +
      `(${sum((r) => r.accepted)} accepted, ${sum((r) => r.rejected)} rejected), ${sum((r) => r.logEntries)} log entries, ` +
      `${sum((r) => r.effects)} effects, ${sum((r) => r.failedHandles)} failed handles, ${sum((r) => r.duplicates)} redeliveries skipped`,
    `faults: ${DATABASE_FAULT_KINDS.map((k) => `${k} ${sum((r) => r.faults[k])}`).join(', ')}; ` +
      `${sum((r) => r.terminated)} backends terminated (${sum((r) => r.midTransaction)} inside an inbox transaction), ${sum((r) => r.skipped.length)} skipped`,
    `violations: ${sum((r) => r.violations.length)} in ${violating.length} schedules${violating.length ? ` (seeds ${violating.map((r) => r.seed).join(', ')})` : ''}`,
  ].join('\n');
}

export function describeDatabaseRun(r: DatabaseRunFigures): string {
  const faults = DATABASE_FAULT_KINDS.filter((k) => r.faults[k] > 0)
    .map((k) => `${k} ${r.faults[k]}`)
    .join(', ');
  return (
    `seed ${r.seed}: ${r.violations.length} violations in ${r.ms} ms; ${r.accepted}/${r.published} accepted, ${r.logEntries} log entries, ` +
    `${r.effects} effects, ${r.failedHandles} failed handles, ${r.duplicates} skipped; ${r.terminated} terminated ` +
    `(${r.midTransaction} mid-transaction); faults: ${faults || 'none'}`
  );
}
