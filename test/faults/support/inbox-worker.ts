/**
 * Worker process of the database fault schedules (test/faults/database-schedule.ts): a Nest
 * app whose one handler writes its effect row through the inbox, on a `pg` pool of its own
 * (its connections named WORKER_APP, so a fault finds them), and whose outbox relay appends
 * the publisher's rows. It speaks the chaos worker's IPC messages, so the same supervisor
 * runs it. Env: chaosWorkerEnv's, and DBFUZZ_DATABASE_URL.
 */
import 'reflect-metadata';
import { Injectable, Module, OnModuleDestroy } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { Pool, PoolClient } from 'pg';
import { ConsumerOptions, EventrailConsumers, EventrailMessage, EventrailModule, OnEvent } from '../../../lib';
import { EventrailInbox, EventrailOutboxModule, pgConnector } from '../../../lib/outbox';
import { DB_EVENT, DB_GROUP, databaseKeys, WORKER_APP } from '../database-schedule';
import type { ChaosWorkerMessage } from './chaos-protocol';

const PREFIX = required('EVENTRAIL_PREFIX');
const REDIS_URL = required('EVENTRAIL_REDIS_URL');
const DATABASE_URL = required('DBFUZZ_DATABASE_URL');
const PARTITIONS = Number(required('CHAOS_PARTITIONS'));
const CONSUMER = JSON.parse(process.env.CHAOS_CONSUMER ?? '{}') as ConsumerOptions;

// No `error` listener of the app's on purpose: a lost connection must not end the process through the connectors' own use.
const pool = new Pool({ connectionString: DATABASE_URL, max: 8, application_name: WORKER_APP, connectionTimeoutMillis: 5_000 });

@Injectable()
class Counters implements OnModuleDestroy {
  readonly redis = new Redis(REDIS_URL);

  onModuleDestroy(): void {
    this.redis.disconnect();
  }
}

@Injectable()
class InboxHandlers {
  constructor(
    private readonly inbox: EventrailInbox,
    private readonly counters: Counters,
  ) {}

  /** The effect and the inbox row in one transaction, held open a few ms so faults land inside it. */
  @OnEvent(DB_EVENT, DB_GROUP)
  async handle(message: EventrailMessage<{ n: number }>): Promise<void> {
    try {
      const { duplicate } = await this.inbox.handle<void, PoolClient>(message, async (tx) => {
        await tx.query('insert into fuzz_effects (event_id, key, n, pid) values ($1, $2, $3, $4)', [
          message.id,
          message.key ?? '',
          message.data.n,
          process.pid,
        ]);
        await tx.query('select pg_sleep($1)', [Math.random() * 0.004]);
      });
      if (duplicate) await this.counters.redis.incr(databaseKeys.duplicates(PREFIX));
    } catch (error) {
      await this.counters.redis.incr(databaseKeys.failed(PREFIX));
      throw error;
    }
  }
}

@Module({
  imports: [
    EventrailModule.forRoot({ redis: REDIS_URL, prefix: PREFIX, partitions: PARTITIONS, consumer: CONSUMER, dedupWindowMs: 600_000 }),
    EventrailOutboxModule.forRoot({
      connector: pgConnector(pool),
      ensureSchema: true,
      relay: { pollIntervalMs: 200, retryBackoffMs: 50, retryBackoffMaxMs: 500 },
      inbox: { pruneIntervalMs: 0 },
    }),
  ],
  providers: [Counters, InboxHandlers],
})
class InboxWorkerModule {}

function report(message: ChaosWorkerMessage): Promise<void> {
  if (!process.connected) return Promise.resolve();
  return new Promise((resolve) => process.send?.(message, undefined, {}, () => resolve()));
}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(InboxWorkerModule, { logger: ['warn', 'error'] });
  const consumers = app.get(EventrailConsumers);
  process.on('message', () => void report({ type: 'stats', pid: process.pid, stats: consumers.stats() }));
  // The test runner is gone: do not linger as an orphan.
  process.on('disconnect', () => process.exit(1));
  await report({ type: 'ready', pid: process.pid, workerId: consumers.workerId });
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`inbox-worker: ${name} is not set`);
  return value;
}

main().catch((error: unknown) => {
  console.error('inbox-worker failed to start:', error);
  process.exit(1);
});
