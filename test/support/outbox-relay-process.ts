/**
 * A relay process for the outbox crash suites: a Nest app with eventrail and
 * the outbox relay, and no handlers. It tells the parent over IPC when its
 * relay becomes active (`{ type: 'active', pid }`) and, when asked
 * (`{ cmd: 'stats' }`), its relay's stats. Configured through the environment:
 * RELAY_REDIS_URL, RELAY_DATABASE_URL, RELAY_PREFIX, RELAY_PARTITIONS,
 * RELAY_OUTBOX_TABLE, RELAY_BATCH_SIZE, and RELAY_DOUBLE_SEND_RATE (a fraction
 * of batches appended twice, as a flaky network would make a relay resend).
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Pool } from 'pg';
import { EventrailModule, EventrailPublisher } from '../../lib';
import { EventrailOutboxModule, EventrailOutboxRelay, pgConnector } from '../../lib/outbox';

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

const pool = new Pool({ connectionString: required('RELAY_DATABASE_URL'), max: 4 });

@Module({
  imports: [
    EventrailModule.forRoot({
      redis: required('RELAY_REDIS_URL'),
      prefix: required('RELAY_PREFIX'),
      partitions: Number(process.env.RELAY_PARTITIONS ?? 1),
      dedupWindowMs: 600_000,
      autoStart: false,
      allowDegradedStart: true,
    }),
    EventrailOutboxModule.forRoot({
      connector: pgConnector(pool),
      outboxTable: required('RELAY_OUTBOX_TABLE'),
      inboxTable: `${required('RELAY_OUTBOX_TABLE')}_inbox`,
      relay: { enabled: true, batchSize: Number(process.env.RELAY_BATCH_SIZE ?? 50), retryBackoffMs: 20, retryBackoffMaxMs: 500 },
      inbox: { pruneIntervalMs: 0 },
    }),
  ],
})
class RelayApp {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(RelayApp, { logger: ['error', 'warn', 'log'] });
  const doubleRate = Number(process.env.RELAY_DOUBLE_SEND_RATE ?? 0);
  if (doubleRate > 0) {
    // Appends some batches twice: what a relay does when a reply is lost and it sends again.
    const publisher = app.get(EventrailPublisher);
    const publishMany = publisher.publishMany.bind(publisher);
    publisher.publishMany = async (events, options) => {
      const results = await publishMany(events, options);
      if (Math.random() < doubleRate) {
        send({ type: 'double-sent', count: events.length });
        return publishMany(events, options);
      }
      return results;
    };
  }
  const relay = app.get(EventrailOutboxRelay);
  const timer = setInterval(() => {
    if (relay.isActive()) {
      clearInterval(timer);
      send({ type: 'active', pid: process.pid });
    }
  }, 10);
  process.on('message', (command: { cmd: string }) => {
    if (command.cmd === 'stats') send({ type: 'stats', stats: relay.stats() });
    if (command.cmd === 'stop')
      void app
        .close()
        .then(() => pool.end())
        .then(() => process.exit(0));
  });
  send({ type: 'ready', pid: process.pid });
}

function send(message: unknown): void {
  if (process.connected) process.send?.(message);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
