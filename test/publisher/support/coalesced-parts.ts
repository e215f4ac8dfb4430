import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { createConnection, createServer, Server, Socket } from 'node:net';
import { EventrailPublisher, PublishResult } from '../../../lib';
import { EventrailRedis } from '../../../lib/redis/eventrail-redis';
import { EventrailKeys } from '../../../lib/redis/keys';
import { createApp } from '../../support/app';

/**
 * Helpers of the coalesced-parts attack suites (helper-87): a publisher app on a given server, the log read back
 * with each entry's tag and number, each call's settled outcome, and the checks every suite makes of them
 * (`violations`: an offset that holds another call's event, an event twice, key order against call order), plus
 * a proxy that cuts the path to Redis after a number of bytes.
 */
export const PARTITIONS = 4;

export interface Pub {
  app: INestApplicationContext;
  publisher: EventrailPublisher;
  client: Redis;
}

export async function publisherOn(
  port: number,
  prefix: string,
  redis: Record<string, unknown> = {},
  options: Record<string, unknown> = {},
): Promise<Pub> {
  const app = await createApp({
    redis: { host: '127.0.0.1', port, ...redis } as never,
    prefix,
    partitions: PARTITIONS,
    ...options,
  });
  const publisher = app.get(EventrailPublisher);
  await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n }, partition: n })));
  return { app, publisher, client: app.get(EventrailRedis).client as Redis };
}

/** `cmdstat_<name>` calls from INFO commandstats. */
export async function calls(redis: Redis, name: string): Promise<number> {
  const match = new RegExp(`^cmdstat_${name}:calls=(\\d+)`, 'm').exec(await redis.info('commandstats'));
  return Number(match?.[1] ?? 0);
}

export interface Entry {
  partition: number;
  offset: string;
  fields: string[];
  n: number;
  tag: string;
}

/** Every entry of `prefix` with a data {n, tag}, in stream order per partition. */
export async function readLog(admin: Redis, prefix: string, partitions = PARTITIONS): Promise<Entry[]> {
  const keys = new EventrailKeys(prefix, partitions);
  const all: Entry[] = [];
  for (let p = 0; p < partitions; p++) {
    if ((await admin.type(keys.stream(p))) !== 'stream') continue;
    let from = '-';
    for (;;) {
      const chunk = await admin.xrange(keys.stream(p), from, '+', 'COUNT', 2000);
      for (const [offset, fields] of chunk) {
        const di = fields.indexOf('data');
        let n = -1;
        let tag = '';
        try {
          const d = JSON.parse(fields[di + 1]) as { n?: number; tag?: string };
          n = typeof d.n === 'number' ? d.n : -1;
          tag = d.tag ?? '';
        } catch {
          /* not ours */
        }
        all.push({ partition: p, offset, fields, n, tag });
      }
      if (chunk.length < 2000) break;
      from = `(${chunk[chunk.length - 1][0]}`;
    }
  }
  return all;
}

export function field(fields: string[], name: string): string | undefined {
  for (let i = 0; i < fields.length; i += 2) if (fields[i] === name) return fields[i + 1];
  return undefined;
}

export type Settled = { ok: true; value: PublishResult } | { ok: false; error: unknown };

export function settle(p: Promise<PublishResult>): Promise<Settled> {
  return p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

/**
 * Checks outcomes of calls tagged `tag` (call i carries data.n = i) against the log:
 * returns a list of violations (empty when fine).
 */
export function violations(
  tag: string,
  outcomes: Settled[],
  log: Entry[],
  opts: { keyOf?: (n: number) => string | undefined } = {},
): string[] {
  const bad: string[] = [];
  const mine = log.filter((e) => e.tag === tag);
  const copies = new Map<number, Entry[]>();
  for (const e of mine) copies.set(e.n, [...(copies.get(e.n) ?? []), e]);
  for (const [n, c] of copies) if (c.length > 1) bad.push(`n=${n} in the log ${c.length}x`);
  const byOffset = new Map<string, Entry>();
  for (const e of log) byOffset.set(`${e.partition}/${e.offset}`, e);
  outcomes.forEach((o, n) => {
    if (o.ok) {
      const e = byOffset.get(`${o.value.partition}/${o.value.offset}`);
      if (!e) bad.push(`n=${n} resolved ${o.value.partition}/${o.value.offset}: nothing there`);
      else if (e.tag !== tag || e.n !== n) bad.push(`n=${n} resolved ${o.value.partition}/${o.value.offset}: holds ${e.tag}/${e.n}`);
    } else {
      const msg = String((o.error as Error)?.message ?? o.error);
      if (/was refused, nothing was appended/.test(msg) || (o.error as Error)?.name === 'RedisFullError') {
        if (copies.has(n)) bad.push(`n=${n} rejected as not appended (${msg.slice(0, 80)}) but in the log`);
      }
    }
  });
  if (opts.keyOf) {
    // per key order: log order of a key's entries must be increasing in n
    const lastByKey = new Map<string, number>();
    for (const e of mine) {
      const k = opts.keyOf(e.n);
      if (k === undefined) continue;
      const last = lastByKey.get(k);
      if (last !== undefined && e.n < last) bad.push(`key ${k}: n=${e.n} after n=${last}`);
      lastByKey.set(k, e.n);
    }
  }
  return bad;
}

/**
 * A proxy whose client->server direction can be cut after `bytes` more bytes (the rest held, never sent),
 * replies passing; drop() closes everything.
 */
export class ByteCutProxy {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private budget = Infinity;
  port = 0;
  forwardedSinceArm = 0;

  private constructor(private readonly target: number) {
    this.server = createServer((client) => this.accept(client));
  }

  static async start(port: number): Promise<ByteCutProxy> {
    const proxy = new ByteCutProxy(port);
    await new Promise<void>((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    proxy.port = (proxy.server.address() as { port: number }).port;
    return proxy;
  }

  /** From now on, forward only `bytes` more bytes towards Redis (on all connections together). */
  cutAfter(bytes: number): void {
    this.budget = bytes;
    this.forwardedSinceArm = 0;
  }

  drop(): void {
    this.budget = Infinity;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  async close(): Promise<void> {
    this.drop();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    const upstream = createConnection(this.target, '127.0.0.1');
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => (client.destroy(), upstream.destroy()));
    }
    client.on('data', (chunk: Buffer) => {
      if (this.budget === Infinity) return void upstream.write(chunk);
      const n = Math.min(this.budget, chunk.length);
      if (n > 0) upstream.write(chunk.subarray(0, n));
      this.budget -= n;
      this.forwardedSinceArm += n;
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
  }
}
