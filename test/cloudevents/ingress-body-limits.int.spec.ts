import { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import Redis from 'ioredis';
import { request as httpRequest } from 'node:http';
import { EventrailCloudEventsModule, EventrailModule } from '../../lib';
import { ATTRIBUTE_ROOM_BYTES } from '../../lib/cloudevents/cloud-events-body-reader';
import { EventrailKeys } from '../../lib/redis/keys';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';
import { seededRandom } from '../support/seeded-random';

const TOKEN = 'limits-secret-1';
const PARTITIONS = 2;
const MAX = 100_000;
const LIMIT = MAX + ATTRIBUTE_ROOM_BYTES;
const STRUCTURED = 'application/cloudevents+json';
const BATCH = 'application/cloudevents-batch+json';

interface Reply {
  status: number;
  body: { accepted?: unknown[]; statusCode?: number; error?: string; message?: string } | string;
}

type Mode = 'structured' | 'batch' | 'binary';

describe.each(['express', 'fastify'] as const)('CloudEvents ingress body limits and round trips (%s)', (platform) => {
  const redis = new Redis(testRedisUrl());
  let app: INestApplication | undefined;
  let prefix = '';
  let port = 0;

  beforeAll(async () => {
    prefix = uniquePrefix('ce-limits');
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: PARTITIONS, maxPayloadBytes: MAX }),
        EventrailCloudEventsModule.register({ auth: { token: TOKEN } }),
      ],
    }).compile();
    app =
      platform === 'fastify'
        ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
        : moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    port = (app.getHttpServer().address() as { port: number }).port;
  });
  afterAll(async () => {
    await app?.close();
    await deletePrefix(redis, prefix);
    await redis.quit();
  });

  /** One POST; `chunked` sends the body in 16 KiB writes without Content-Length. */
  function post(headers: Record<string, string>, body: string, chunked: boolean): Promise<Reply> {
    return new Promise((resolve, reject) => {
      const bytes = Buffer.from(body, 'utf8');
      const request = httpRequest(
        {
          host: '127.0.0.1',
          port,
          method: 'POST',
          path: '/cloudevents',
          headers: { authorization: `Bearer ${TOKEN}`, ...headers, ...(chunked ? {} : { 'content-length': String(bytes.length) }) },
        },
        (response) => {
          const chunks: Buffer[] = [];
          response.on('data', (chunk: Buffer) => chunks.push(chunk));
          response.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let parsed: Reply['body'] = text;
            try {
              parsed = JSON.parse(text) as Reply['body'];
            } catch {
              // kept as text: the assertion shows it
            }
            resolve({ status: response.statusCode ?? 0, body: parsed });
          });
        },
      );
      // The server may answer 413 and close before the whole body is written: the answer is what counts.
      request.on('error', (error) => (request.destroyed && request.writableFinished ? undefined : reject(error)));
      if (!chunked) return void request.end(bytes);
      for (let at = 0; at < bytes.length; at += 16 * 1024) request.write(bytes.subarray(at, at + 16 * 1024));
      request.end();
    });
  }

  async function storedData(): Promise<Map<string, string>> {
    const keys = new EventrailKeys(prefix, PARTITIONS);
    const byId = new Map<string, string>();
    for (let p = 0; p < PARTITIONS; p++) {
      for (const [, fields] of await redis.xrange(keys.stream(p), '-', '+')) {
        const map = new Map<string, string>();
        for (let i = 0; i < fields.length; i += 2) map.set(fields[i], fields[i + 1]);
        const headers = JSON.parse(map.get('headers') ?? '{}') as Record<string, string>;
        byId.set(headers['ce-id'], map.get('data') ?? 'null');
      }
    }
    return byId;
  }

  const ce = (id: string): Record<string, string> => ({
    'ce-specversion': '1.0',
    'ce-id': id,
    'ce-source': 'urn:limits',
    'ce-type': 'limits.tested',
  });

  /** A request of `mode` whose body is exactly `size` bytes (UTF-8), every event's data within maxPayloadBytes. */
  function requestOfSize(mode: Exclude<Mode, 'binary'>, id: string, size: number): { headers: Record<string, string>; body: string } {
    const event = (n: number, data: string): Record<string, unknown> => ({
      specversion: '1.0',
      id: `${id}-${n}`,
      source: 'urn:limits',
      type: 'limits.tested',
      data,
    });
    // JSON whitespace fills the request up to the size: the attributes themselves stay small.
    const json =
      mode === 'structured'
        ? JSON.stringify(event(0, 'd'.repeat(MAX - 10_000)))
        : JSON.stringify([0, 1, 2].map((n) => event(n, 'd'.repeat(40_000))));
    const padding = size - Buffer.byteLength(json);
    if (padding < 0) throw new Error(`no ${mode} request of ${size} bytes here`);
    const body = `${' '.repeat(padding >> 1)}${json}${' '.repeat(padding - (padding >> 1))}`;
    expect(Buffer.byteLength(body)).toBe(size);
    return { headers: { 'content-type': mode === 'structured' ? STRUCTURED : BATCH }, body };
  }

  it('a request one under, at and one over maxPayloadBytes + 64 KiB, with and without Content-Length, in every mode', async () => {
    const outcomes: Array<{ mode: Mode; size: number; chunked: boolean; status: number; error?: string }> = [];
    const expected: typeof outcomes = [];
    let n = 0;
    for (const chunked of [false, true]) {
      for (const mode of ['structured', 'batch'] as const) {
        for (const size of [LIMIT - 1, LIMIT, LIMIT + 1]) {
          const { headers, body } = requestOfSize(mode, `r${n++}`, size);
          const reply = await post(headers, body, chunked);
          const error = typeof reply.body === 'object' ? reply.body.error : undefined;
          outcomes.push({ mode, size, chunked, status: reply.status, ...(reply.status === 202 ? {} : { error }) });
          expected.push({
            mode,
            size,
            chunked,
            ...(size <= LIMIT ? { status: 202 } : { status: 413, error: 'CloudEventsRequestTooLargeError' }),
          });
          if (reply.status === 413) {
            expect(reply.body).toEqual({
              statusCode: 413,
              error: 'CloudEventsRequestTooLargeError',
              message: expect.stringContaining(`(maxPayloadBytes, ${MAX}, plus ${ATTRIBUTE_ROOM_BYTES}`),
            });
          }
        }
      }
      // Binary mode: the body is the data, so maxPayloadBytes decides first (as JSON), then the request limit.
      for (const size of [MAX - 1, MAX, MAX + 1, LIMIT, LIMIT + 1]) {
        const reply = await post({ ...ce(`b${n++}`), 'content-type': 'application/json' }, JSON.stringify('x'.repeat(size - 2)), chunked);
        const error = typeof reply.body === 'object' ? reply.body.error : undefined;
        outcomes.push({ mode: 'binary', size, chunked, status: reply.status, ...(reply.status === 202 ? {} : { error }) });
        expected.push({
          mode: 'binary',
          size,
          chunked,
          ...(size <= MAX
            ? { status: 202 }
            : { status: 413, error: size <= LIMIT ? 'PayloadTooLargeError' : 'CloudEventsRequestTooLargeError' }),
        });
      }
    }
    expect(outcomes).toEqual(expected);
  });

  it('200 generated bodies per mode are stored as sent (binary JSON and text, structured, batch)', async () => {
    const random = seededRandom(platform === 'express' ? 2501 : 2502);
    const sent = new Map<string, string>();
    for (let i = 0; i < 200; i++) {
      const chunked = random() < 0.3;
      // Binary JSON data: any JSON value, parsed once and stored as the same value.
      const value = randomJson(random, 4);
      const json = JSON.stringify(value);
      const a = await post({ ...ce(`bj-${i}`), 'content-type': 'application/json; charset=utf-8' }, json, chunked);
      expect({ i, json, status: a.status }).toEqual({ i, json, status: 202 });
      sent.set(`bj-${i}`, json);
      // Binary text data: stored as the text that was sent.
      const text = randomText(random, Math.floor(random() * 300));
      const type = random() < 0.5 ? 'text/plain; charset=utf-8' : 'application/x-www-form-urlencoded';
      const b = await post({ ...ce(`bt-${i}`), 'content-type': type }, text, chunked);
      expect({ i, text, status: b.status }).toEqual({ i, text, status: 202 });
      sent.set(`bt-${i}`, text === '' ? 'null' : JSON.stringify(text));
      // Structured and batch: the data value of each event.
      const event = { specversion: '1.0', id: `s-${i}`, source: 'urn:limits', type: 'limits.tested', data: randomJson(random, 4) };
      const c = await post({ 'content-type': STRUCTURED }, JSON.stringify(event), chunked);
      expect({ i, status: c.status }).toEqual({ i, status: 202 });
      sent.set(`s-${i}`, JSON.stringify(event.data));
      const batch = Array.from({ length: 1 + Math.floor(random() * 5) }, (_, k) => ({
        specversion: '1.0',
        id: `m-${i}-${k}`,
        source: 'urn:limits',
        type: 'limits.tested',
        subject: `k${Math.floor(random() * 7)}`,
        data: randomJson(random, 3),
      }));
      const d = await post({ 'content-type': BATCH }, JSON.stringify(batch), chunked);
      expect({ i, status: d.status }).toEqual({ i, status: 202 });
      for (const e of batch) sent.set(e.id, JSON.stringify(e.data));
    }
    const all = await storedData();
    const stored = new Map([...all].filter(([id]) => sent.has(id)));
    const mismatches = [...sent]
      .filter(([id, data]) => stored.get(id) !== data)
      .map(([id, data]) => ({ id, sent: data, stored: stored.get(id) }));
    expect(mismatches).toEqual([]);
    expect(stored.size).toBe(sent.size);
  });
});

function randomText(random: () => number, length: number): string {
  const alphabet = ['a', 'Z', '0', ' ', '"', '\\', '{', '}', '&', '=', '%', '+', 'é', '€', '😀', '\n', '\t', '\u0000', '\u2028', '\ufeff'];
  return Array.from({ length }, () => alphabet[Math.floor(random() * alphabet.length)]).join('');
}

function randomJson(random: () => number, depth: number): unknown {
  const pick = random();
  if (depth === 0 || pick < 0.45) {
    if (pick < 0.05) return null;
    if (pick < 0.1) return random() < 0.5;
    if (pick < 0.2) return Math.round((random() - 0.5) * 2 ** 40);
    if (pick < 0.25) return Number(((random() - 0.5) * 1e6).toFixed(3)) || 1;
    return randomText(random, Math.floor(random() * 20));
  }
  if (pick < 0.7) return Array.from({ length: Math.floor(random() * 4) }, () => randomJson(random, depth - 1));
  return Object.fromEntries(
    Array.from({ length: Math.floor(random() * 4) }, () => [
      randomText(random, 1 + Math.floor(random() * 6)),
      randomJson(random, depth - 1),
    ]),
  );
}
