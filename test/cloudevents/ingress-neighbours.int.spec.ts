import { Body, Controller, Module, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { INestApplication } from '@nestjs/common';
import { EventrailCloudEventsModule, EventrailModule } from '../../lib';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';
import Redis from 'ioredis';
import { binaryHeaders, Ingress, TOKEN, type Platform } from './ingress-harness';

// The app's own route, whose path happens to end like the ingress's.
@Controller('partners')
class PartnerController {
  @Post('cloudevents')
  receive(@Body() body: unknown): { got: unknown } {
    return { got: body ?? 'nothing' };
  }
}
@Module({ controllers: [PartnerController] })
class PartnerModule {}

describe.each(['express', 'fastify'] as Platform[])('the ingress and its neighbours (%s)', (platform) => {
  const redis = new Redis(testRedisUrl());
  let app: INestApplication | undefined;
  let prefix = '';
  afterEach(async () => {
    await app?.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.quit());

  // Promise (cloud-events-body-reader.ts): the reader hooks the ingress's requests so the app's own parsers never
  // decide what a CloudEvent's data is. It must not take other routes' bodies: it matches any path ending in the
  // ingress's path.
  it("the app's own POST /partners/cloudevents keeps its JSON body and the app's body limit", async () => {
    prefix = uniquePrefix('ce-nb');
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: 2, maxPayloadBytes: 4 * 1024 * 1024 }),
        EventrailCloudEventsModule.register({ auth: { token: TOKEN } }),
        PartnerModule,
      ],
    }).compile();
    app =
      platform === 'fastify'
        ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
        : moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    const port = (app.getHttpServer().address() as { port: number }).port;
    const reply = await fetch(`http://127.0.0.1:${port}/partners/cloudevents`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"partner":1}',
    });
    // The app's parser limit (Express 100 kB, Fastify 1 MiB) still applies to its own route, not the ingress's 4 MiB.
    const big = await fetch(`http://127.0.0.1:${port}/partners/cloudevents`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ p: 'x'.repeat(2 * 1024 * 1024) }),
    });
    const bigText = await big.text();
    expect({ status: reply.status, body: await reply.json(), big: big.status, bigError: bigText.includes('CloudEvents') }).toEqual({
      status: 201,
      body: { got: { partner: 1 } },
      big: 413,
      bigError: false,
    });
  });
});

describe.each(['express', 'fastify'] as Platform[])('text data at maxPayloadBytes (%s)', (platform) => {
  const ingress = new Ingress(platform);
  afterEach(() => ingress.close());
  afterAll(() => ingress.quit());

  // maxPayloadBytes is compared with the data's JSON text as stored (the docs say so): text data counts its two
  // quotes and its escapes (a control character is 6 bytes, \u0001).
  it('text data is measured as its JSON text: quotes and escapes count', async () => {
    const max = 30_000;
    await ingress.boot({ maxPayloadBytes: max });
    const send = (id: string, text: string) => ingress.request(binaryHeaders(id, { 'content-type': 'text/plain' }), text);
    const fits = await send('t-fits', 't'.repeat(max - 2));
    const over = await send('t-over', 't'.repeat(max - 1));
    const controlFits = await send('c-fits', '\u0001'.repeat(4999));
    const controlOver = await send('c-over', '\u0001'.repeat(5000));
    expect({
      fits: fits.status,
      over: [over.status, over.json?.message],
      controlFits: controlFits.status,
      controlOver: [controlOver.status, controlOver.json?.message],
      stored: (await ingress.entries()).map((e) => e.ceId).sort(),
    }).toEqual({
      fits: 202,
      over: [413, 'Event "test.sent": data is 30001 bytes, over maxPayloadBytes (30000)'],
      controlFits: 202,
      controlOver: [413, 'Event "test.sent": data is 30002 bytes, over maxPayloadBytes (30000)'],
      stored: ['c-fits', 't-fits'],
    });
  });
});
