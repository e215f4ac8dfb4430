import { INestApplication, Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { CloudEvent, emitterFor, HTTP, httpTransport, Mode } from 'cloudevents';
import Redis from 'ioredis';
import {
  EventrailCloudEvents,
  EventrailCloudEventsModule,
  EventrailCloudEventsOptions,
  EventrailMessage,
  EventrailModule,
  IngressAuthRequiredError,
  OnEvent,
} from '../../lib';
import { resolveCloudEventsOptions } from '../../lib/cloudevents/cloud-events-ingress.options';
import { cloudEventId } from '../../lib/cloudevents/cloud-event.codec';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const TOKEN = 'ingress-secret-123';
const received: EventrailMessage[] = [];

@Injectable()
class Invoices {
  @OnEvent(['invoice.paid', 'invoice.voided'], 'invoices')
  handle(message: EventrailMessage): void {
    received.push(message);
  }
}

interface Reply {
  status: number;
  body: { accepted?: Array<{ id: string; partition: number; offset: string }>; error?: string; message?: string };
}

describe('CloudEvents HTTP ingress', () => {
  const redis = new Redis(testRedisUrl());
  let app: INestApplication | undefined;
  let prefix = '';
  let url = '';

  afterEach(async () => {
    await app?.close();
    app = undefined;
    received.length = 0;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.quit());

  async function boot(ingress: EventrailCloudEventsOptions, moduleOptions = {}, fastify = false): Promise<void> {
    prefix = uniquePrefix('ce');
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({
          redis: testRedisUrl(),
          prefix,
          partitions: 2,
          cloudEvents: { source: 'https://shop.example' },
          ...moduleOptions,
        }),
        EventrailCloudEventsModule.register(ingress),
      ],
      providers: [Invoices],
    }).compile();
    app = fastify
      ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
      : moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    url = `http://127.0.0.1:${(app.getHttpServer().address() as { port: number }).port}/cloudevents`;
  }

  async function post(headers: Record<string, string>, body: string, auth = true): Promise<Reply> {
    const response = await fetch(url, {
      method: 'POST',
      headers: { ...(auth ? { authorization: `Bearer ${TOKEN}` } : {}), ...headers },
      body,
    });
    return { status: response.status, body: (await response.json()) as Reply['body'] };
  }

  const invoice = (extra: Record<string, unknown> = {}): CloudEvent<{ invoice: number; cents: number }> =>
    new CloudEvent({
      type: 'invoice.paid',
      source: 'urn:billing',
      subject: 'invoice-9',
      time: '2026-11-30T08:15:00Z',
      data: { invoice: 9, cents: 1250 },
      tenant: 'acme',
      ...extra,
    });

  it('binary mode, from the SDK emitter: validated, appended with its id, key and extensions, and handled', async () => {
    await boot({ auth: { token: TOKEN } });
    const event = invoice();
    const emit = emitterFor(httpTransport(url), { mode: Mode.BINARY });
    // The transport sends the options of each emit as request headers.
    const response = (await emit(event, { headers: { authorization: `Bearer ${TOKEN}` } })) as { body: string };
    const { accepted } = JSON.parse(response.body) as Reply['body'];
    expect(accepted).toHaveLength(1);
    const message = await waitFor(() => received[0], 'the handler call');
    expect(message).toMatchObject({
      id: cloudEventId('urn:billing', event.id),
      event: 'invoice.paid',
      key: 'invoice-9',
      data: { invoice: 9, cents: 1250 },
      headers: { tenant: 'acme', 'ce-id': event.id, 'ce-source': 'urn:billing', 'ce-time': '2026-11-30T08:15:00.000Z' },
      partition: accepted![0].partition,
      offset: accepted![0].offset,
    });
    // And out again as the same CloudEvent, which the SDK accepts.
    const back = app!.get(EventrailCloudEvents).toCloudEvent(message);
    expect(new CloudEvent(back, true)).toMatchObject({
      id: event.id,
      source: 'urn:billing',
      type: 'invoice.paid',
      subject: 'invoice-9',
      tenant: 'acme',
    });
  });

  it('structured and batch mode; a bad event in a batch appends nothing and names what is wrong', async () => {
    await boot({ auth: { token: TOKEN } });
    const structured = HTTP.structured(invoice());
    expect((await post(structured.headers as Record<string, string>, structured.body as string)).status).toBe(202);

    const batch = [invoice({ subject: 'invoice-10' }), invoice({ type: 'invoice.voided', subject: 'invoice-10' })];
    const ok = await post({ 'content-type': 'application/cloudevents-batch+json' }, JSON.stringify(batch));
    expect(ok.status).toBe(202);
    expect(ok.body.accepted).toHaveLength(2);
    await waitFor(() => received.length === 3, 'three handler calls');
    expect(received.filter((m) => m.key === 'invoice-10').map((m) => m.event)).toEqual(['invoice.paid', 'invoice.voided']);

    const bad = [invoice({ subject: 'invoice-11' }), { ...JSON.parse(JSON.stringify(invoice())), time: 'yesterday' }];
    const refused = await post({ 'content-type': 'application/cloudevents-batch+json' }, JSON.stringify(bad));
    expect(refused).toEqual({
      status: 400,
      body: { statusCode: 400, error: 'InvalidCloudEventError', message: expect.stringMatching(/event 1: .*time must be an RFC 3339/) },
    });
    const keys = new EventrailKeys(prefix, 2);
    const lengths = await Promise.all([0, 1].map((p) => redis.xlen(keys.stream(p))));
    expect(lengths.reduce((a, b) => a + b, 0)).toBe(3);
  });

  it('works on Fastify too: binary (JSON and text data), structured and batch mode', async () => {
    await boot({ auth: { token: TOKEN } }, {}, true);
    const binary = HTTP.binary(invoice());
    expect((await post(binary.headers as Record<string, string>, binary.body as string)).status).toBe(202);
    const text = HTTP.binary(invoice({ datacontenttype: 'text/plain', data: 'paid in cash' }));
    expect((await post(text.headers as Record<string, string>, text.body as string)).status).toBe(202);
    const structured = HTTP.structured(invoice());
    expect((await post(structured.headers as Record<string, string>, structured.body as string)).status).toBe(202);
    const batch = await post({ 'content-type': 'application/cloudevents-batch+json' }, JSON.stringify([invoice(), invoice()]));
    expect(batch.status).toBe(202);
    await waitFor(() => received.length === 5, 'five handler calls');
    expect(received[1]).toMatchObject({ data: 'paid in cash', headers: { 'ce-datacontenttype': 'text/plain' } });
    const bad = await post({ 'content-type': 'application/cloudevents+json' }, '{"specversion":"1.0"}');
    expect(bad).toMatchObject({ status: 400, body: { error: 'InvalidCloudEventError' } });
  });

  it('refuses what is not a CloudEvent (415), a missing attribute (400) and binary data (400)', async () => {
    await boot({ auth: { token: TOKEN } });
    expect((await post({ 'content-type': 'application/json' }, '{"hello":1}')).status).toBe(415);
    const noType = await post({ 'ce-specversion': '1.0', 'ce-id': '1', 'ce-source': '/s', 'content-type': 'application/json' }, '{}');
    expect(noType).toMatchObject({ status: 400, body: { error: 'InvalidCloudEventError', message: expect.stringContaining('type') } });
    const binary = await post(
      { 'content-type': 'application/cloudevents+json' },
      JSON.stringify({ specversion: '1.0', id: '1', source: '/s', type: 't', data_base64: 'AAEC' }),
    );
    expect(binary).toMatchObject({ status: 400, body: { message: expect.stringContaining('data_base64') } });
  });

  it('uses the dashboard rules: the token when configured, this machine only without one, never a web page', async () => {
    await boot({ auth: { token: TOKEN } });
    const { headers, body } = HTTP.binary(invoice());
    expect((await post(headers as Record<string, string>, body as string, false)).status).toBe(401);
    expect((await post({ ...(headers as Record<string, string>), authorization: 'Bearer wrong' }, body as string, false)).status).toBe(401);
    const fromPage = await post(
      { ...(headers as Record<string, string>), origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' },
      body as string,
    );
    expect(fromPage.status).toBe(403);
    await app!.close();
    app = undefined;

    await boot({});
    // From this machine without a token: accepted; claiming to come through a proxy: refused.
    expect((await post(headers as Record<string, string>, body as string, false)).status).toBe(202);
    const proxied = await post({ ...(headers as Record<string, string>), 'x-forwarded-for': '203.0.113.9' }, body as string, false);
    expect(proxied).toMatchObject({ status: 403, body: { message: expect.stringContaining('only from this machine') } });
    expect(() => resolveCloudEventsOptions({}, { NODE_ENV: 'production' })).toThrow(IngressAuthRequiredError);
    expect(() => resolveCloudEventsOptions({ path: '/ce', maxBatchsize: 3 } as never)).toThrow(/did you mean maxBatchSize/);
  });

  it('answers the webhook validation handshake (OPTIONS with WebHook-Request-Origin), behind the same access rules', async () => {
    await boot({ auth: { token: TOKEN } });
    const ask = (headers: Record<string, string>): Promise<Response> => fetch(url, { method: 'OPTIONS', headers });
    const allowed = await ask({ 'webhook-request-origin': 'eventgrid.azure.net', authorization: `Bearer ${TOKEN}` });
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get('webhook-allowed-origin')).toBe('eventgrid.azure.net');
    expect((await ask({ 'webhook-request-origin': 'eventgrid.azure.net' })).status).toBe(401);
    expect((await ask({ authorization: `Bearer ${TOKEN}` })).status).toBe(400);
  });

  it('answers 503 when Redis is away, so the sender retries', async () => {
    await boot({ auth: { token: TOKEN } });
    // Without a connection, the publisher refuses at once with RedisUnavailableError.
    const redisOf = app!.get(EventrailRedis);
    redisOf.client.disconnect();
    await waitFor(() => !redisOf.isReady(), 'the connection to drop');
    const { headers, body } = HTTP.binary(invoice());
    const reply = await post(headers as Record<string, string>, body as string);
    expect(reply).toMatchObject({ status: 503, body: { error: 'RedisUnavailableError' } });
  });
});
