import { Body, Controller, INestApplication, Injectable, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Payload } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { Test } from '@nestjs/testing';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import type { IncomingMessage, ServerResponse } from 'node:http';
import Redis from 'ioredis';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  EventrailAdmin,
  EventrailMessage,
  EventrailModule,
  EventrailModuleOptions,
  EventrailPublisher,
  EventrailRetention,
  OnEvent,
} from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailClient, EventrailServer } from '../../lib/microservices';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register({ propagator: new W3CTraceContextPropagator(), contextManager: new AsyncLocalStorageContextManager() });
const tracer = trace.getTracer('test-app');

/** What the handlers saw, per test. */
const handled: Array<{ id: string; attempt: number; traceparent?: string }> = [];
let failUntilAttempt = 1;

@Injectable()
class Ledger {
  @OnEvent('order.placed', { group: 'ledger', retryBackoffMs: 1, retryBackoffMaxMs: 2, maxRetries: 1 })
  async record(message: EventrailMessage<{ orderId: string }>): Promise<void> {
    handled.push({ id: message.id, attempt: message.attempt, traceparent: message.headers.traceparent });
    // The handler's own work, as a database client's instrumentation would trace it.
    await tracer.startActiveSpan('ledger.insert', async (span) => {
      await Promise.resolve();
      span.end();
    });
    if (message.attempt < failUntilAttempt) throw new Error(`ledger busy (attempt ${message.attempt})`);
  }
}

@Controller('orders')
class OrdersController {
  constructor(private readonly publisher: EventrailPublisher) {}

  @Post()
  async place(@Body() body: { orderId: string }): Promise<{ id: string }> {
    const { id } = await this.publisher.publish('order.placed', body, { key: body.orderId });
    return { id };
  }
}

/** A SERVER span per request, from the caller's `traceparent`: what @opentelemetry/instrumentation-http does. */
function serverSpans(req: IncomingMessage, res: ServerResponse, next: () => void): void {
  const parent = propagation.extract(ROOT_CONTEXT, req.headers);
  const span = tracer.startSpan(`${req.method} ${req.url?.split('?')[0]}`, { kind: SpanKind.SERVER }, parent);
  res.on('finish', () => span.end());
  context.with(trace.setSpan(parent, span), next);
}

@Controller()
class BillingController {
  @EventPattern<string>('payment.completed')
  async handle(@Payload() data: { n: number }): Promise<void> {
    await tracer.startActiveSpan('billing.charge', async (span) => {
      span.setAttribute('n', data.n);
      await Promise.resolve();
      span.end();
    });
  }
}

function spansOf(prefix: string): ReadableSpan[] {
  const traced = exporter.getFinishedSpans();
  const ours = new Set(traced.filter((s) => s.attributes['messaging.eventrail.prefix'] === prefix).map((s) => s.spanContext().traceId));
  return traced.filter((s) => ours.has(s.spanContext().traceId) || s.attributes['messaging.eventrail.prefix'] === prefix);
}

function one(spans: ReadableSpan[], name: string): ReadableSpan {
  const found = spans.filter((s) => s.name === name);
  expect(found.map((s) => s.name)).toEqual([name]);
  return found[0];
}

describe('OpenTelemetry traces across the log', () => {
  const redis = new Redis(testRedisUrl());
  let app: INestApplication | undefined;
  let prefix = '';

  beforeEach(() => {
    exporter.reset();
    handled.length = 0;
    failUntilAttempt = 1;
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(async () => {
    await redis.quit();
    await provider.shutdown();
  });

  async function boot(options: EventrailModuleOptions = {}): Promise<string> {
    prefix = uniquePrefix('otel');
    const moduleRef = await Test.createTestingModule({
      imports: [EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: 2, ...options })],
      controllers: [OrdersController],
      providers: [Ledger],
    }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    app.use(serverSpans);
    await app.listen(0, '127.0.0.1');
    return (await app.getUrl()).replace('[::1]', '127.0.0.1');
  }

  async function placeOrder(url: string, orderId: string, traceparent?: string): Promise<string> {
    const response = await fetch(`${url}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(traceparent ? { traceparent } : {}) },
      body: JSON.stringify({ orderId }),
    });
    expect(response.status).toBe(201);
    return ((await response.json()) as { id: string }).id;
  }

  it('with tracing.parent, one trace runs from the HTTP request through publish and the log to the handler and its own spans', async () => {
    const url = await boot({ tracing: { parent: true } });
    const callerTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const id = await placeOrder(url, 'o-1', `00-${callerTrace}-00f067aa0ba902b7-01`);
    await waitFor(() => spansOf(prefix).some((s) => s.name === 'ledger.insert'), 'the handler span');
    const spans = spansOf(prefix);
    const server = one(spans, 'POST /orders');
    const producer = one(spans, 'publish order.placed');
    const consumer = one(spans, 'process order.placed');
    const insert = one(spans, 'ledger.insert');

    for (const span of [server, producer, consumer, insert]) expect(span.spanContext().traceId).toBe(callerTrace);
    expect(producer.parentSpanContext?.spanId).toBe(server.spanContext().spanId);
    expect(consumer.parentSpanContext?.spanId).toBe(producer.spanContext().spanId);
    expect(insert.parentSpanContext?.spanId).toBe(consumer.spanContext().spanId);
    expect(consumer.links.map((l) => l.context.spanId)).toEqual([producer.spanContext().spanId]);

    expect(producer.kind).toBe(SpanKind.PRODUCER);
    expect(producer.attributes).toMatchObject({
      'messaging.system': 'eventrail',
      'messaging.operation.type': 'send',
      'messaging.destination.name': 'order.placed',
      'messaging.message.id': id,
      'messaging.eventrail.key': 'o-1',
    });
    expect(consumer.kind).toBe(SpanKind.CONSUMER);
    expect(consumer.attributes).toMatchObject({
      'messaging.system': 'eventrail',
      'messaging.operation.type': 'process',
      'messaging.destination.name': 'order.placed',
      'messaging.consumer.group.name': 'ledger',
      'messaging.message.id': id,
      'messaging.destination.partition.id': producer.attributes['messaging.destination.partition.id'],
      'messaging.eventrail.offset': producer.attributes['messaging.eventrail.offset'],
      'messaging.eventrail.attempt': 1,
    });
    // The W3C trace context travelled in the event's headers.
    const { traceId, spanId } = producer.spanContext();
    expect(handled).toEqual([{ id, attempt: 1, traceparent: `00-${traceId}-${spanId}-01` }]);
  });

  it('by default each attempt starts a trace of its own that links to the producer; a retry and a dead letter are span events', async () => {
    const url = await boot({ consumer: { ordering: 'partition' } });
    failUntilAttempt = 2; // the first attempt fails, the retry succeeds
    await placeOrder(url, 'o-2');
    await waitFor(() => spansOf(prefix).filter((s) => s.name === 'process order.placed').length === 2, 'two attempts');
    const producer = one(spansOf(prefix), 'publish order.placed');
    const attempts = spansOf(prefix)
      .filter((s) => s.name === 'process order.placed')
      .sort((a, b) => Number(a.attributes['messaging.eventrail.attempt']) - Number(b.attributes['messaging.eventrail.attempt']));
    for (const attempt of attempts) {
      expect(attempt.parentSpanContext).toBeUndefined();
      expect(attempt.spanContext().traceId).not.toBe(producer.spanContext().traceId);
      expect(attempt.links.map((l) => l.context.spanId)).toEqual([producer.spanContext().spanId]);
    }
    expect(attempts[0].status).toMatchObject({ code: SpanStatusCode.ERROR, message: 'ledger busy (attempt 1)' });
    expect(attempts[0].events.map((e) => e.name)).toEqual(['exception']);
    expect(attempts[1].status.code).toBe(SpanStatusCode.UNSET);
    expect(attempts[1].events.map((e) => [e.name, e.attributes])).toEqual([['eventrail.retry', { 'messaging.eventrail.attempt': 2 }]]);

    failUntilAttempt = 10; // maxRetries 1: two attempts, then the dead letter
    exporter.reset();
    await placeOrder(url, 'o-3');
    await waitFor(() => spansOf(prefix).some((s) => s.name === 'dead-letter order.placed'), 'the dead-letter span');
    const letter = one(spansOf(prefix), 'dead-letter order.placed');
    expect(letter.events.map((e) => [e.name, e.attributes])).toEqual([
      [
        'eventrail.dead_letter',
        { 'eventrail.reason': 'retries-exhausted', 'eventrail.attempts': 2, 'exception.message': 'ledger busy (attempt 2)' },
      ],
    ]);
    expect(letter.links.map((l) => l.context.spanId)).toEqual([one(spansOf(prefix), 'publish order.placed').spanContext().spanId]);
  });

  it('a dead-letter replay is a span of its own; the new attempts link to it and to the original producer', async () => {
    const url = await boot({ consumer: { ordering: 'partition' } });
    failUntilAttempt = 10;
    await placeOrder(url, 'o-5');
    await waitFor(() => spansOf(prefix).some((s) => s.name === 'dead-letter order.placed'), 'the dead letter');
    const producer = one(spansOf(prefix), 'publish order.placed');
    failUntilAttempt = 1;
    exporter.reset();
    expect(await app!.get(EventrailAdmin).replayDeadLetters('ledger', 'all')).toBe(1);
    await waitFor(() => spansOf(prefix).some((s) => s.name === 'process order.placed'), 'the replayed attempt');
    const replay = one(spansOf(prefix), 'replay order.placed');
    expect(replay.kind).toBe(SpanKind.PRODUCER);
    expect(replay.events.map((e) => e.name)).toEqual(['eventrail.replay']);
    expect(replay.links.map((l) => l.context.spanId)).toEqual([producer.spanContext().spanId]);
    const attempt = one(spansOf(prefix), 'process order.placed');
    expect(attempt.links.map((l) => l.context.spanId)).toEqual([producer.spanContext().spanId, replay.spanContext().spanId]);
    expect(attempt.events.map((e) => e.name)).toEqual(['eventrail.replay']);
  });

  it('an archive restore is a span of its own too, and the restored attempts link to it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'eventrail-otel-'));
    try {
      const url = await boot({ retention: { enabled: false, maxLen: 0, archive: { driver: 'fs', dir } } });
      await placeOrder(url, 'o-6');
      await waitFor(() => handled.length === 1, 'the first handling');
      const producer = one(spansOf(prefix), 'publish order.placed');
      const retention = app!.get(EventrailRetention);
      // The commit that lets retention trim the entry follows the handler call: wait for the trim itself.
      await waitFor(
        async () =>
          (await retention.runOnce()).ran &&
          (await redis.xlen(new EventrailKeys(prefix, 2).stream(Number(producer.attributes['messaging.destination.partition.id'])))) === 0,
        'the entry archived and trimmed',
      );
      exporter.reset();
      expect(await retention.restoreArchive('ledger', { from: new Date(0) })).toBe(1);
      await waitFor(() => spansOf(prefix).some((s) => s.name === 'process order.placed'), 'the restored attempt');
      const restore = one(spansOf(prefix), 'restore order.placed');
      expect(restore.events.map((e) => e.name)).toEqual(['eventrail.restore']);
      expect(restore.links.map((l) => l.context.spanId)).toEqual([producer.spanContext().spanId]);
      const attempt = one(spansOf(prefix), 'process order.placed');
      expect(attempt.links.map((l) => l.context.spanId)).toEqual([producer.spanContext().spanId, restore.spanContext().spanId]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('the microservices transport is traced the same way: emit in a request, the @EventPattern handler and its own spans', async () => {
    prefix = uniquePrefix('otel');
    @Module({ controllers: [BillingController] })
    class BillingModule {}
    const server = new EventrailServer({ redis: testRedisUrl(), prefix, group: 'billing', tracing: { parent: true } });
    const microservice = await NestFactory.createMicroservice(BillingModule, { strategy: server, logger: false });
    await microservice.listen();
    const client = new EventrailClient({ redis: testRedisUrl(), prefix });
    try {
      await tracer.startActiveSpan('checkout', async (span) => {
        await lastValueFrom(client.emit('payment.completed', { n: 7 }));
        span.end();
      });
      await waitFor(() => exporter.getFinishedSpans().some((s) => s.name === 'billing.charge'), 'the handler span');
    } finally {
      await client.close();
      await microservice.close();
    }
    const spans = spansOf(prefix);
    const request = one(exporter.getFinishedSpans(), 'checkout');
    const producer = one(spans, 'publish payment.completed');
    const consumer = one(spans, 'process payment.completed');
    const charge = one(spans, 'billing.charge');
    expect(producer.parentSpanContext?.spanId).toBe(request.spanContext().spanId);
    expect(consumer.parentSpanContext?.spanId).toBe(producer.spanContext().spanId);
    expect(charge.parentSpanContext?.spanId).toBe(consumer.spanContext().spanId);
    expect(consumer.attributes).toMatchObject({
      'messaging.consumer.group.name': 'billing',
      'code.function.name': "@EventPattern('payment.completed')",
    });
  });

  it('publishMany is one PRODUCER span; events keep a trace context they already carry, and the span links to it', async () => {
    await boot();
    const publisher = app!.get(EventrailPublisher);
    const relayed = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const results = await publisher.publishMany([
      { event: 'order.placed', data: { orderId: 'a' }, key: 'a' },
      { event: 'order.placed', data: { orderId: 'b' }, key: 'b', headers: { traceparent: relayed, tenant: 't1' } },
    ]);
    const batch = one(spansOf(prefix), 'publish order.placed');
    expect(batch.attributes).toMatchObject({ 'messaging.batch.message_count': 2, 'messaging.operation.type': 'send' });
    expect(batch.links.map((l) => l.context.spanId)).toEqual(['b7ad6b7169203331']);
    const keys = new EventrailKeys(prefix, 2);
    const headersOf = async (partition: number, offset: string): Promise<Record<string, string>> => {
      const [[, fields]] = await redis.xrange(keys.stream(partition), offset, offset);
      return JSON.parse(fields[fields.indexOf('headers') + 1]) as Record<string, string>;
    };
    const { traceId, spanId } = batch.spanContext();
    expect(await headersOf(results[0].partition, results[0].offset)).toEqual({ traceparent: `00-${traceId}-${spanId}-01` });
    expect(await headersOf(results[1].partition, results[1].offset)).toEqual({ traceparent: relayed, tenant: 't1' });
  });

  it('a failed publish ends its span with the error', async () => {
    await boot();
    await expect(app!.get(EventrailPublisher).publish('order.placed', { n: 1 }, { partition: 7 })).rejects.toThrow(/partition/);
    const span = one(spansOf(prefix), 'publish order.placed');
    expect(span.status.code).toBe(SpanStatusCode.ERROR);
  });

  it('tracing: { enabled: false } makes no spans and writes no headers', async () => {
    const url = await boot({ tracing: { enabled: false } });
    const id = await placeOrder(url, 'o-4');
    await waitFor(() => handled.length === 1, 'the handler call');
    expect(handled).toEqual([{ id, attempt: 1, traceparent: undefined }]);
    expect(spansOf(prefix)).toEqual([]);
    expect(exporter.getFinishedSpans().map((s) => s.name)).not.toContain('publish order.placed');
  });
});
