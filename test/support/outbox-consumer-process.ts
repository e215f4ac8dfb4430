/**
 * A consumer process for the unified-log chaos suite: groups `distance` and
 * `rides` book each `ride.booked` into totals in PostgreSQL through the inbox.
 * With CONSUMER_KILL_RATE, after a message's database transaction committed and
 * before the handler returns (so before its offset is committed), it SIGKILLs
 * itself at that rate: the redelivery must find the inbox row. It reports every
 * redelivery the inbox absorbed over IPC (`{ type: 'duplicate', group, id }`).
 * Env: CONSUMER_REDIS_URL, CONSUMER_DATABASE_URL, CONSUMER_PREFIX, CONSUMER_PARTITIONS.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Pool, PoolClient } from 'pg';
import { EventrailMessage, EventrailModule, OnEvent } from '../../lib';
import { EventrailInbox, EventrailOutboxModule, pgConnector } from '../../lib/outbox';

interface RideBooked {
  rideId: number;
  userId: string;
  distance: number;
}

const KILL_RATE = Number(process.env.CONSUMER_KILL_RATE ?? 0);
const pool = new Pool({ connectionString: process.env.CONSUMER_DATABASE_URL, max: 4 });
const GROUP_OPTIONS = { lockTtlMs: 2_000, heartbeatTtlMs: 2_000, retryBackoffMs: 20, retryBackoffMaxMs: 200, maxRetries: 50 };

function report(message: unknown): Promise<void> {
  if (!process.connected) return Promise.resolve();
  return new Promise((resolve) => process.send?.(message, undefined, {}, () => resolve()));
}

@Injectable()
class Totals {
  constructor(private readonly inbox: EventrailInbox) {}

  @OnEvent('ride.booked', { group: 'distance', ...GROUP_OPTIONS })
  distance(message: EventrailMessage<RideBooked>): Promise<void> {
    return this.book(
      message,
      'insert into distance_totals (user_id, km) values ($1, $2) on conflict (user_id) do update set km = distance_totals.km + excluded.km',
      [message.data.userId, message.data.distance],
    );
  }

  @OnEvent('ride.booked', { group: 'rides', ...GROUP_OPTIONS })
  rides(message: EventrailMessage<RideBooked>): Promise<void> {
    return this.book(
      message,
      'insert into ride_counts (user_id, rides) values ($1, 1) on conflict (user_id) do update set rides = ride_counts.rides + 1',
      [message.data.userId],
    );
  }

  /** A non-idempotent effect (an increment): only the inbox keeps a redelivery from counting twice. */
  private async book(message: EventrailMessage<RideBooked>, sql: string, params: unknown[]): Promise<void> {
    const { duplicate } = await this.inbox.handle<void, PoolClient>(message, async (tx) => {
      await tx.query(sql, params);
    });
    if (duplicate) await report({ type: 'duplicate', group: message.group, id: message.id });
    if (KILL_RATE > 0 && Math.random() < KILL_RATE) {
      await report({ type: 'self-kill', group: message.group, id: message.id });
      process.kill(process.pid, 'SIGKILL'); // committed in the database, not yet in Redis
    }
  }
}

@Module({
  imports: [
    EventrailModule.forRoot({
      redis: process.env.CONSUMER_REDIS_URL,
      prefix: process.env.CONSUMER_PREFIX,
      partitions: Number(process.env.CONSUMER_PARTITIONS ?? 1),
      dedupWindowMs: 600_000,
      allowDegradedStart: true,
    }),
    EventrailOutboxModule.forRoot({ connector: pgConnector(pool), relay: { enabled: false }, inbox: { pruneIntervalMs: 0 } }),
  ],
  providers: [Totals],
})
class ConsumerApp {}

async function main(): Promise<void> {
  await NestFactory.createApplicationContext(ConsumerApp, { logger: ['error', 'warn'] });
  await report({ type: 'ready', pid: process.pid });
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
