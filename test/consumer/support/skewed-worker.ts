/**
 * A worker on a host whose clock is `SKEWED_CLOCK_MS` off, for the clock-skew
 * tests. Its group `SKEWED_GROUP` (consumer options `SKEWED_CONSUMER`, JSON)
 * handles `pay.ok`, recording each handling in Redis
 * (`<prefix>:test:handled`, the event ids), and `pay.failing`, which records
 * the attempt (`<prefix>:test:attempts`) and throws. Sends `ready` over IPC
 * once its group runs.
 */
import './clock-skew';
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailModule, OnEvent } from '../../../lib';

const PREFIX = process.env.SKEWED_PREFIX as string;
const REDIS_URL = process.env.SKEWED_REDIS_URL as string;
const GROUP = process.env.SKEWED_GROUP as string;
const records = new Redis(REDIS_URL);

@Injectable()
class Handlers {
  @OnEvent('pay.ok', GROUP)
  async ok(message: EventrailMessage): Promise<void> {
    await records.rpush(`${PREFIX}:test:handled`, message.id);
  }

  @OnEvent('pay.failing', GROUP)
  async failing(message: EventrailMessage): Promise<void> {
    await records.rpush(`${PREFIX}:test:attempts`, `${process.pid}:${message.attempt}`);
    throw new Error('the payment provider is down');
  }
}

@Module({
  imports: [
    EventrailModule.forRoot({
      redis: REDIS_URL,
      prefix: PREFIX,
      consumer: JSON.parse(process.env.SKEWED_CONSUMER ?? '{}'),
    }),
  ],
  providers: [Handlers],
})
class WorkerModule {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(WorkerModule, { logger: ['warn', 'error'] });
  app.enableShutdownHooks();
  await app.get(EventrailConsumers).whenRunning();
  process.on('disconnect', () => process.exit(1));
  process.send?.({ type: 'ready' });
}

main().catch((error: unknown) => {
  console.error('skewed-worker failed to start:', error);
  process.exit(1);
});
