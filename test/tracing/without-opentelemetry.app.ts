/**
 * Run by without-opentelemetry.int.spec.ts with block-opentelemetry.cjs preloaded, so @opentelemetry/api cannot be
 * found: loads the main entry, publishes and handles one event, and reports over IPC what was loaded when.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventrailMessage, EventrailModule, EventrailPublisher, OnEvent } from '../../lib';

const requests = (globalThis as unknown as { openTelemetryRequests: string[] }).openTelemetryRequests;
const requestedAtLoad = requests.length;
let received: (message: EventrailMessage) => void = () => undefined;
const handled = new Promise<EventrailMessage>((resolve) => (received = resolve));

@Injectable()
class Handler {
  @OnEvent('ping', 'no-otel')
  handle(message: EventrailMessage): void {
    received(message);
  }
}

async function main(): Promise<void> {
  const prefix = process.env.TEST_PREFIX!;
  @Module({ imports: [EventrailModule.forRoot({ redis: process.env.EVENTRAIL_TEST_REDIS_URL, prefix })], providers: [Handler] })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  const published = await app.get(EventrailPublisher).publish('ping', { n: 1 });
  const message = await handled;
  await app.close();
  process.send!({ requestedAtLoad, requests: [...requests], published, headers: message.headers, id: message.id }, () => process.exit(0));
}

void main().catch((error: unknown) => {
  process.send!({ error: String(error) }, () => process.exit(1));
});
