/**
 * A worker of one version of a service, for the rolling-deploy tests: one
 * group (`VERSIONED_GROUP`) whose handlers are the events in `VERSIONED_EVENTS`
 * (comma-separated), as two builds of one service differ by a handler. Each
 * handled event is recorded in Redis (`<prefix>:test:handled:<event>`, the
 * event ids, and `<prefix>:test:by:<pid>`), so the record survives a SIGKILL.
 * Run as `node -r @swc-node/register test/consumer/support/versioned-worker.ts`
 * with an IPC channel; it sends `{ type: 'ready', workerId }` once its group runs.
 * `VERSIONED_LOCK_TTL_MS` and `VERSIONED_HEARTBEAT_TTL_MS` set its TTLs; with
 * `VERSIONED_DEAF=1` it ignores the rebalance signal, as when its pub/sub
 * connection lost the message, and learns of others only at its ticks.
 * `VERSIONED_CONSUMER` (JSON) adds consumer options; the handler of
 * `VERSIONED_HOLD_EVENT` waits while `<prefix>:test:hold` exists.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailModule, OnEvent } from '../../../lib';

const PREFIX = required('VERSIONED_PREFIX');
const REDIS_URL = required('VERSIONED_REDIS_URL');
const GROUP = required('VERSIONED_GROUP');
const PARTITIONS = Number(required('VERSIONED_PARTITIONS'));
const EVENTS = required('VERSIONED_EVENTS').split(',').filter(Boolean);

const records = new Redis(REDIS_URL);

const HOLD_EVENT = process.env.VERSIONED_HOLD_EVENT;

async function record(message: EventrailMessage): Promise<void> {
  // Fault injection: a handler that takes as long as the test wants.
  while (message.event === HOLD_EVENT && (await records.exists(`${PREFIX}:test:hold`)) === 1) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await records
    .multi()
    .rpush(`${PREFIX}:test:handled:${message.event}`, message.id)
    .rpush(`${PREFIX}:test:by:${process.pid}`, message.id)
    .exec();
}

/** One handler class per event: the decorator takes its event at class definition, so the set is built here. */
function handlerFor(event: string): new () => unknown {
  @Injectable()
  class Handler {
    @OnEvent(event, GROUP)
    handle(message: EventrailMessage): Promise<void> {
      return record(message);
    }
  }
  Object.defineProperty(Handler, 'name', { value: `Handler_${event.replace(/\W/g, '_')}` });
  return Handler;
}

@Module({
  imports: [
    EventrailModule.forRoot({
      redis: REDIS_URL,
      prefix: PREFIX,
      partitions: PARTITIONS,
      // Short leases and heartbeats: a killed worker's partitions and membership go within seconds. The crash
      // tests set a longer heartbeat, so that the hold on a gone member's types (3 TTLs) outlasts a restart
      // of the worker process on a loaded host.
      consumer: {
        lockTtlMs: Number(process.env.VERSIONED_LOCK_TTL_MS ?? 1_500),
        heartbeatTtlMs: Number(process.env.VERSIONED_HEARTBEAT_TTL_MS ?? 1_500),
        ...JSON.parse(process.env.VERSIONED_CONSUMER ?? '{}'),
      },
    }),
  ],
  providers: [...EVENTS.map(handlerFor)],
})
class WorkerModule {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(WorkerModule, { logger: ['log', 'warn', 'error'] });
  app.enableShutdownHooks();
  const consumers = app.get(EventrailConsumers);
  await consumers.whenRunning();
  if (process.env.VERSIONED_DEAF === '1') {
    // Fault injection: the signal reaches the process but not the group.
    const groups = (consumers as unknown as { groups: Map<string, { requestRebalance(): void }> }).groups;
    for (const group of groups.values()) group.requestRebalance = () => undefined;
  }
  process.on('disconnect', () => process.exit(1));
  process.send?.({ type: 'ready', workerId: consumers.workerId });
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`versioned-worker: ${name} is not set`);
  return value;
}

main().catch((error: unknown) => {
  console.error('versioned-worker failed to start:', error);
  process.exit(1);
});
