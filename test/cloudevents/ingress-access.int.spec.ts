import { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import Redis from 'ioredis';
import { request as httpRequest } from 'node:http';
import { networkInterfaces } from 'node:os';
import { EventrailCloudEventsModule, EventrailModule } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

const TOKEN = 'access-secret-1';
const PARTITIONS = 2;

/** This machine's first non-loopback IPv4 address: a connection to it comes from a peer that is not loopback. */
function outsideAddress(): string | undefined {
  for (const list of Object.values(networkInterfaces())) {
    for (const address of list ?? []) if (address.family === 'IPv4' && !address.internal) return address.address;
  }
  return undefined;
}

type Case = [name: string, headers: Record<string, string | string[]>, status: number, options?: { path?: string; host?: string }];

describe.each(['express', 'fastify'] as const)('CloudEvents ingress access (%s)', (platform) => {
  const redis = new Redis(testRedisUrl());
  let app: INestApplication | undefined;
  let prefix = '';
  let port = 0;

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.quit());

  async function boot(auth: { token: string } | false, host: string): Promise<void> {
    prefix = uniquePrefix('ce-access');
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: PARTITIONS }),
        EventrailCloudEventsModule.register({ auth }),
      ],
    }).compile();
    app =
      platform === 'fastify'
        ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
        : moduleRef.createNestApplication({ logger: false });
    await app.listen(0, host);
    port = (app.getHttpServer().address() as { port: number }).port;
  }

  /** A binary-mode event, with exactly the headers given (arrays repeat a header). */
  function post(id: string, headers: Record<string, string | string[]>, options: { path?: string; host?: string } = {}): Promise<number> {
    return new Promise((resolve, reject) => {
      const request = httpRequest(
        {
          host: options.host ?? '127.0.0.1',
          port,
          method: 'POST',
          path: options.path ?? '/cloudevents',
          headers: {
            'ce-specversion': '1.0',
            'ce-id': id,
            'ce-source': 'urn:access',
            'ce-type': 'access.tested',
            'content-type': 'application/json',
            ...headers,
          },
        },
        (response) => {
          response.resume();
          response.on('end', () => resolve(response.statusCode ?? 0));
        },
      );
      request.on('error', reject);
      request.end('{}');
    });
  }

  async function storedIds(): Promise<string[]> {
    const keys = new EventrailKeys(prefix, PARTITIONS);
    const ids: string[] = [];
    for (let p = 0; p < PARTITIONS; p++) {
      for (const [, fields] of await redis.xrange(keys.stream(p), '-', '+')) {
        ids.push((JSON.parse(fields[fields.indexOf('headers') + 1]) as Record<string, string>)['ce-id']);
      }
    }
    return ids.sort();
  }

  async function run(cases: Case[]): Promise<void> {
    const outcomes: Array<[string, number]> = [];
    for (const [name, headers, , options] of cases) outcomes.push([name, await post(name, headers, options)]);
    expect(outcomes).toEqual(cases.map(([name, , status]) => [name, status]));
    expect(await storedIds()).toEqual(
      cases
        .filter(([, , status]) => status === 202)
        .map(([name]) => name)
        .sort(),
    );
  }

  it('with a token, only Authorization: Bearer <that token> passes; a token elsewhere or malformed is 401', async () => {
    await boot({ token: TOKEN }, '127.0.0.1');
    await run([
      ['exact', { authorization: `Bearer ${TOKEN}` }, 202],
      ['scheme-lowercase', { authorization: `bearer ${TOKEN}` }, 202],
      ['trailing-space', { authorization: `Bearer   ${TOKEN}  ` }, 202],
      ['missing', {}, 401],
      ['empty', { authorization: '' }, 401],
      ['empty-bearer', { authorization: 'Bearer ' }, 401],
      ['one-short', { authorization: `Bearer ${TOKEN.slice(0, -1)}` }, 401],
      ['one-long', { authorization: `Bearer ${TOKEN}x` }, 401],
      ['twice', { authorization: `Bearer ${TOKEN} ${TOKEN}` }, 401],
      ['basic', { authorization: `Basic ${Buffer.from(`u:${TOKEN}`).toString('base64')}` }, 401],
      ['bare', { authorization: TOKEN }, 401],
      ['query', {}, 401, { path: `/cloudevents?access_token=${TOKEN}&token=${TOKEN}` }],
      // Node keeps the first of repeated Authorization headers: a wrong first one is not rescued by a right second.
      ['repeated', { authorization: ['Bearer wrong', `Bearer ${TOKEN}`] }, 401],
    ]);
  });

  it('without a token, this machine only: Host, X-Forwarded-*, Forwarded and Origin never open it', async () => {
    await boot(false, '0.0.0.0');
    const local = `localhost:${port}`;
    const outside = outsideAddress();
    await run([
      ['loopback', { host: local }, 202],
      ['xff-loopback', { host: local, 'x-forwarded-for': '127.0.0.1' }, 403],
      ['forwarded-loopback', { host: local, forwarded: 'for=127.0.0.1' }, 403],
      ['x-real-ip', { host: local, 'x-real-ip': '127.0.0.1' }, 403],
      ['foreign-host', { host: 'evil.example' }, 403],
      ['rebinding-host', { host: `localhost.evil.example:${port}` }, 403],
      ['other-origin', { host: local, origin: 'http://localhost:1' }, 403],
      ['null-origin', { host: local, origin: 'null' }, 403],
      ['same-site', { host: local, 'sec-fetch-site': 'same-site' }, 403],
      // A peer that is not loopback (this machine's own outside address), whatever it claims.
      ...(outside === undefined
        ? []
        : ([
            ['outside', { host: local }, 403, { host: outside }],
            [
              'outside-xff',
              { host: `127.0.0.1:${port}`, 'x-forwarded-for': '127.0.0.1', 'x-real-ip': '127.0.0.1' },
              403,
              { host: outside },
            ],
            ['outside-origin', { host: local, origin: `http://${local}` }, 403, { host: outside }],
          ] as Case[])),
    ]);
  });
});
