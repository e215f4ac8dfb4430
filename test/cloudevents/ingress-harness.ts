import { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import Redis from 'ioredis';
import http from 'node:http';
import { EventrailCloudEventsModule, EventrailModule } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

export const TOKEN = 'ingress-test-token';
export type Platform = 'express' | 'fastify';
export interface Stored {
  partition: number;
  ceId?: string;
  dataRaw: string;
  data: unknown;
  headers: Record<string, string>;
}
export interface Reply {
  status: number;
  text: string;
  json: { accepted?: Array<{ id: string; partition: number; duplicate?: boolean }>; error?: string; message?: string } | null;
}

export class Ingress {
  app?: INestApplication;
  prefix = '';
  port = 0;
  readonly redis: Redis;
  constructor(
    readonly platform: Platform,
    readonly partitions = 2,
    redisUrl = testRedisUrl(),
  ) {
    this.redis = new Redis(redisUrl);
  }
  async boot(
    moduleOptions: Record<string, unknown> = {},
    ingress: Record<string, unknown> = { auth: { token: TOKEN } },
    host = '127.0.0.1',
    redisUrl = testRedisUrl(),
  ): Promise<void> {
    this.prefix = uniquePrefix('ce-ing');
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({ redis: redisUrl, prefix: this.prefix, partitions: this.partitions, ...moduleOptions }),
        EventrailCloudEventsModule.register(ingress as never),
      ],
    }).compile();
    this.app =
      this.platform === 'fastify'
        ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
        : moduleRef.createNestApplication({ logger: false });
    await this.app.listen(0, host);
    this.port = (this.app.getHttpServer().address() as { port: number }).port;
  }
  async close(): Promise<void> {
    await this.app?.close();
    this.app = undefined;
    await deletePrefix(this.redis, this.prefix);
  }
  async quit(): Promise<void> {
    await this.close();
    this.redis.disconnect();
  }
  /** A raw HTTP request: headers as given (arrays repeat a header), the body as chunks when an array (no Content-Length). */
  request(
    headers: Record<string, string | string[]>,
    body: string | Buffer | Buffer[],
    options: { path?: string; host?: string; auth?: boolean } = {},
  ): Promise<Reply> {
    return new Promise((resolve, reject) => {
      const all: Record<string, string | string[]> = {
        ...(options.auth === false ? {} : { authorization: `Bearer ${TOKEN}` }),
        ...headers,
      };
      const req = http.request(
        { host: options.host ?? '127.0.0.1', port: this.port, method: 'POST', path: options.path ?? '/cloudevents', headers: all },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString();
            let json: Reply['json'];
            try {
              json = JSON.parse(text) as Reply['json'];
            } catch {
              json = null;
            }
            resolve({ status: res.statusCode ?? 0, text, json });
          });
        },
      );
      req.on('error', reject);
      if (Array.isArray(body)) {
        for (const chunk of body) req.write(chunk);
        req.end();
      } else req.end(body);
    });
  }
  async entries(): Promise<Stored[]> {
    const keys = new EventrailKeys(this.prefix, this.partitions);
    const all: Stored[] = [];
    for (let p = 0; p < this.partitions; p++) {
      for (const [, fields] of await this.redis.xrange(keys.stream(p), '-', '+')) {
        const map = new Map<string, string>();
        for (let i = 0; i < fields.length; i += 2) map.set(fields[i], fields[i + 1]);
        const headers = JSON.parse(map.get('headers') ?? '{}') as Record<string, string>;
        all.push({
          partition: p,
          ceId: headers['ce-id'],
          dataRaw: map.get('data') ?? '',
          data: JSON.parse(map.get('data') ?? 'null'),
          headers,
        });
      }
    }
    return all;
  }
}

export const binaryHeaders = (id: string, extra: Record<string, string | string[]> = {}): Record<string, string | string[]> => ({
  'ce-specversion': '1.0',
  'ce-id': id,
  'ce-source': 'urn:test',
  'ce-type': 'test.sent',
  ...extra,
});
