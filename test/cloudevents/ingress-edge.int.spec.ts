import { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import Redis from 'ioredis';
import { EventrailCloudEventsModule, EventrailModule } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';
import { seededRandom } from '../support/seeded-random';

const TOKEN = 'edge-secret-123';
const PARTITIONS = 2;

interface Reply {
  status: number;
  body: {
    accepted?: Array<{ id: string; partition: number; offset: string; duplicate?: boolean }>;
    statusCode?: number;
    error?: string;
    message?: string;
  };
}

interface Entry {
  id?: string;
  event: string;
  data: unknown;
  headers: Record<string, string>;
}

describe.each(['express', 'fastify'] as const)('CloudEvents ingress at the HTTP edge (%s)', (platform) => {
  const redis = new Redis(testRedisUrl());
  let app: INestApplication | undefined;
  let prefix = '';
  let url = '';
  const keys = (): EventrailKeys => new EventrailKeys(prefix, PARTITIONS);

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.quit());

  async function boot(moduleOptions: Record<string, unknown> = {}, globalPrefix?: string): Promise<void> {
    prefix = uniquePrefix('ce-edge');
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: PARTITIONS, ...moduleOptions }),
        EventrailCloudEventsModule.register({ auth: { token: TOKEN } }),
      ],
    }).compile();
    app =
      platform === 'fastify'
        ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
        : moduleRef.createNestApplication({ logger: false });
    if (globalPrefix) app.setGlobalPrefix(globalPrefix);
    await app.listen(0, '127.0.0.1');
    url = `http://127.0.0.1:${(app.getHttpServer().address() as { port: number }).port}${globalPrefix ? `/${globalPrefix}` : ''}/cloudevents`;
  }

  async function post(headers: Record<string, string>, body: string | Buffer | ReadableStream<Uint8Array>): Promise<Reply> {
    const response = await fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, ...headers },
      body,
      // A stream goes without Content-Length, in chunks.
      ...(body instanceof ReadableStream ? { duplex: 'half' } : {}),
    } as RequestInit);
    const text = await response.text();
    let parsed: Reply['body'];
    try {
      parsed = JSON.parse(text) as Reply['body'];
    } catch {
      parsed = { message: `(not JSON) ${text.slice(0, 200)}` };
    }
    return { status: response.status, body: parsed };
  }

  const binary = (id: string, extra: Record<string, string> = {}): Record<string, string> => ({
    'ce-specversion': '1.0',
    'ce-id': id,
    'ce-source': 'urn:edge',
    'ce-type': 'edge.tested',
    ...extra,
  });

  /** Every entry of the log, decoded enough to compare what was stored with what was sent. */
  async function entries(): Promise<Entry[]> {
    const all: Entry[] = [];
    for (let p = 0; p < PARTITIONS; p++) {
      for (const [, fields] of await redis.xrange(keys().stream(p), '-', '+')) {
        const map = new Map<string, string>();
        for (let i = 0; i < fields.length; i += 2) map.set(fields[i], fields[i + 1]);
        all.push({
          id: map.get('id'),
          event: map.get('event') ?? '',
          data: JSON.parse(map.get('data') ?? 'null') as unknown,
          headers: JSON.parse(map.get('headers') ?? '{}') as Record<string, string>,
        });
      }
    }
    return all;
  }

  it('one body limit, maxPayloadBytes, on binary JSON data of generated sizes; over it the documented 413 body', async () => {
    const max = 1_500_000;
    await boot({ maxPayloadBytes: max });
    const random = seededRandom(14);
    // Sizes around Express's 100 kB parser default, Fastify's 1 MiB body limit and maxPayloadBytes itself.
    const sizes = [90_000, 150_000, 1_100_000, max - 2, max - 1, max + 1, 1_600_000, 3_000_000];
    for (let i = 0; i < 6; i++) sizes.push(50_000 + Math.floor(random() * 2_000_000));
    for (const [i, size] of sizes.entries()) {
      // A JSON string of `size` bytes as stored (quotes included).
      const data = 'x'.repeat(size - 2);
      const reply = await post(binary(`size-${i}`, { 'content-type': 'application/json' }), JSON.stringify(data));
      if (size <= max) {
        expect({ size, status: reply.status }).toEqual({ size, status: 202 });
      } else {
        expect({ size, reply }).toEqual({
          size,
          reply: {
            status: 413,
            body: { statusCode: 413, error: expect.stringMatching(/TooLargeError$/), message: expect.stringContaining('maxPayloadBytes') },
          },
        });
      }
    }
    const stored = await entries();
    expect(stored.map((e) => (e.data as string).length + 2).sort((a, b) => a - b)).toEqual(
      sizes.filter((s) => s <= max).sort((a, b) => a - b),
    );
  });

  it('scalar JSON data (numbers, strings, booleans, null) is accepted in binary mode and stored as sent', async () => {
    await boot();
    const random = seededRandom(141);
    const values: unknown[] = [42, 'x', true, false, null, 0, -1.5, '', ' ', '123', '{"admin":true}', '[1,2]'];
    for (let i = 0; i < 20; i++)
      values.push(random() < 0.5 ? Math.round(random() * 1e9) / 1e3 : randomText(random, 1 + Math.floor(random() * 40)));
    for (const [i, value] of values.entries()) {
      const reply = await post(binary(`scalar-${i}`, { 'content-type': 'application/json' }), JSON.stringify(value));
      expect({ value, status: reply.status, body: reply.status === 202 ? undefined : reply.body }).toEqual({
        value,
        status: 202,
        body: undefined,
      });
    }
    const stored = await entries();
    const byId = new Map(stored.map((e) => [e.headers['ce-id'] ?? e.id, e.data]));
    for (const [i, value] of values.entries()) expect({ i, data: byId.get(`scalar-${i}`) }).toEqual({ i, data: value });
  });

  it('a JSON string body is parsed once: binary and structured mode store the string that was sent', async () => {
    await boot();
    const random = seededRandom(15);
    const strings = ['123', '{"admin":true}', '"quoted"', 'null', 'true', '[]'];
    for (let i = 0; i < 20; i++) strings.push(JSON.stringify(randomJson(random, 2)));
    for (const [i, text] of strings.entries()) {
      expect((await post(binary(`b-${i}`, { 'content-type': 'application/json' }), JSON.stringify(text))).status).toBe(202);
      const structured = { specversion: '1.0', id: `s-${i}`, source: 'urn:edge', type: 'edge.tested', data: text };
      expect((await post({ 'content-type': 'application/cloudevents+json' }, JSON.stringify(structured))).status).toBe(202);
    }
    const byId = new Map((await entries()).map((e) => [e.headers['ce-id'] ?? e.id, e.data]));
    for (const [i, text] of strings.entries()) {
      expect({ i, binary: byId.get(`b-${i}`), structured: byId.get(`s-${i}`) }).toEqual({ i, binary: text, structured: text });
    }
  });

  it('eventrailheaders cannot set the attribute headers, and a ce-__proto__ header is refused by name', async () => {
    await boot();
    const reserved = ['ce-source', 'ce-time', 'ce-datacontenttype', 'ce-dataschema', 'ce-id'];
    const values = ['urn:forged', 'not-a-time', 'text/html', '/forged'];
    const random = seededRandom(16);
    for (let i = 0; i < 16; i++) {
      const name = reserved[Math.floor(random() * reserved.length)];
      const packed = JSON.stringify({ 'x-request-id': `r-${i}`, [name]: values[Math.floor(random() * values.length)] });
      const reply =
        random() < 0.5
          ? await post(binary(`h-${i}`, { 'ce-eventrailheaders': encodeURIComponent(packed), 'content-type': 'application/json' }), '{}')
          : await post(
              { 'content-type': 'application/cloudevents+json' },
              JSON.stringify({ specversion: '1.0', id: `h-${i}`, source: 'urn:edge', type: 'edge.tested', eventrailheaders: packed }),
            );
      expect({ name, reply }).toEqual({
        name,
        reply: { status: 400, body: expect.objectContaining({ error: 'InvalidCloudEventError', message: expect.stringContaining(name) }) },
      });
    }
    for (const header of ['ce-__proto__']) {
      const reply = await post(binary('proto', { [header]: 'polluted', 'content-type': 'application/json' }), '{}');
      expect({ header, reply }).toEqual({
        header,
        reply: {
          status: 400,
          body: expect.objectContaining({ error: 'InvalidCloudEventError', message: expect.stringContaining(header.slice(3)) }),
        },
      });
    }
    expect(await entries()).toEqual([]);
  });

  it('a form-urlencoded body is stored as sent, with its content type', async () => {
    await boot();
    const random = seededRandom(17);
    const bodies = ['a=1&b=%20x', 'admin=true', 'a[b]=c&a[d]=e', 'x=%E2%82%AC&x=2'];
    for (let i = 0; i < 16; i++) {
      const pairs = Array.from(
        { length: 1 + Math.floor(random() * 4) },
        () => `${randomWord(random)}=${encodeURIComponent(randomText(random, 6))}`,
      );
      bodies.push(pairs.join('&'));
    }
    for (const [i, body] of bodies.entries()) {
      const reply = await post(binary(`f-${i}`, { 'content-type': 'application/x-www-form-urlencoded' }), body);
      expect({ body, status: reply.status }).toEqual({ body, status: 202 });
    }
    const byId = new Map((await entries()).map((e) => [e.headers['ce-id'] ?? e.id, e]));
    for (const [i, body] of bodies.entries()) {
      expect({ i, data: byId.get(`f-${i}`)?.data, type: byId.get(`f-${i}`)?.headers['ce-datacontenttype'] }).toEqual({
        i,
        data: body,
        type: 'application/x-www-form-urlencoded',
      });
    }
  });

  it('a request body over the limit is refused naming the limit and its number, in every mode', async () => {
    const max = 200_000;
    await boot({ maxPayloadBytes: max });
    const big = 'y'.repeat(max + 70_000);
    const structured = JSON.stringify({ specversion: '1.0', id: 'big', source: 'urn:edge', type: 'edge.tested', data: big });
    const batch = JSON.stringify([JSON.parse(structured)]);
    for (const [headers, body] of [
      [{ 'content-type': 'application/cloudevents+json' }, structured],
      [{ 'content-type': 'application/cloudevents-batch+json' }, batch],
      [binary('big', { 'content-type': 'text/plain' }), big],
    ] as const) {
      const reply = await post(headers, body);
      expect(reply).toEqual({
        status: 413,
        body: { statusCode: 413, error: expect.stringMatching(/TooLargeError$/), message: expect.stringContaining(String(max)) },
      });
      expect(reply.body.message).not.toContain(String(16 * 1024 * 1024));
    }
    // Sent in chunks, without Content-Length: refused at the limit all the same.
    const chunk = new TextEncoder().encode('z'.repeat(64 * 1024));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 8) controller.enqueue(chunk);
        else controller.close();
      },
    });
    const chunked = await post(binary('chunked', { 'content-type': 'text/plain' }), stream);
    expect(chunked).toEqual({
      status: 413,
      body: { statusCode: 413, error: 'CloudEventsRequestTooLargeError', message: expect.stringContaining(String(max)) },
    });
    expect(await entries()).toEqual([]);
  });

  it('with the default limit, a 17 MiB request is refused naming the request limit and maxPayloadBytes as configured', async () => {
    await boot();
    const event = { specversion: '1.0', id: 'huge', source: 'urn:edge', type: 'edge.tested', data: 'h'.repeat(17 * 1024 * 1024) };
    const reply = await post({ 'content-type': 'application/cloudevents+json' }, JSON.stringify(event));
    expect(reply).toEqual({
      status: 413,
      body: {
        statusCode: 413,
        error: 'CloudEventsRequestTooLargeError',
        message: expect.stringMatching(/over the ingress's limit of 1114112 bytes \(maxPayloadBytes, 1048576, plus 65536/),
      },
    });
  });

  it('under a global prefix, the ingress reads its bodies itself all the same', async () => {
    await boot({}, 'api');
    expect((await post(binary('prefixed', { 'content-type': 'application/json' }), '42')).status).toBe(202);
    expect((await entries()).map((e) => e.data)).toEqual([42]);
  });

  it('a batch that failed partway appends each event once when retried (unique by source + id)', async () => {
    await boot();
    const random = seededRandom(18);
    for (let round = 0; round < 4; round++) {
      await deletePrefix(redis, prefix);
      const count = 20 + Math.floor(random() * 60);
      const batch = Array.from({ length: count }, (_, i) => ({
        specversion: '1.0',
        id: `evt-${i}`,
        source: 'urn:edge',
        type: 'edge.tested',
        subject: `key-${Math.floor(random() * 10)}`,
        data: { i },
      }));
      // One partition refuses appends (its stream key holds a string): the batch fails partway.
      await redis.set(keys().stream(1), 'not a stream');
      const failed = await post({ 'content-type': 'application/cloudevents-batch+json' }, JSON.stringify(batch));
      expect(failed.status).toBe(503);
      await redis.del(keys().stream(1));
      for (let attempt = 0; attempt < 2; attempt++) {
        const retried = await post({ 'content-type': 'application/cloudevents-batch+json' }, JSON.stringify(batch));
        expect(retried.status).toBe(202);
      }
      const stored = await entries();
      expect({ round, count: stored.length }).toEqual({ round, count });
      expect(new Set(stored.map((e) => e.headers['ce-id'] ?? e.id)).size).toBe(count);
    }
    // The same id from another source is another event.
    await deletePrefix(redis, prefix);
    for (const source of ['urn:a', 'urn:b', 'urn:a']) {
      const event = { specversion: '1.0', id: 'same', source, type: 'edge.tested', data: {} };
      expect((await post({ 'content-type': 'application/cloudevents+json' }, JSON.stringify(event))).status).toBe(202);
    }
    expect((await entries()).map((e) => e.headers['ce-source']).sort()).toEqual(['urn:a', 'urn:b']);
  });
});

function randomText(random: () => number, length: number): string {
  const alphabet = ['a', 'Z', '0', ' ', '"', '\\', '{', '}', '&', '=', '%', 'é', '€', '😀', '\n', '\t'];
  return Array.from({ length }, () => alphabet[Math.floor(random() * alphabet.length)]).join('');
}

function randomWord(random: () => number): string {
  return Array.from({ length: 1 + Math.floor(random() * 6) }, () => String.fromCharCode(97 + Math.floor(random() * 26))).join('');
}

function randomJson(random: () => number, depth: number): unknown {
  const pick = random();
  if (depth === 0 || pick < 0.4)
    return pick < 0.1 ? null : pick < 0.2 ? random() < 0.5 : pick < 0.3 ? Math.round(random() * 1000) : randomText(random, 5);
  if (pick < 0.7) return Array.from({ length: Math.floor(random() * 3) }, () => randomJson(random, depth - 1));
  return Object.fromEntries(Array.from({ length: Math.floor(random() * 3) }, () => [randomWord(random), randomJson(random, depth - 1)]));
}
