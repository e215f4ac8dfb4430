import { INestApplicationContext } from '@nestjs/common';
import { execFile } from 'node:child_process';
import { createServer, Server, Socket } from 'node:net';
import { promisify } from 'node:util';
import Redis from 'ioredis';
import { EventrailPublisher, InvalidOptionError, PublishManyError, PublishTimeoutError, RedisUnavailableError } from '../../lib';
import { resolveModuleOptions } from '../../lib/module/eventrail.options';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

/**
 * A connection whose packets are dropped without a reset stays `ready` in
 * ioredis, and a command sent on it has no answer until the path heals or the
 * kernel gives up (about 15 minutes). Every publish is still bounded by
 * `publishTimeoutMs`, with an error that says the event may or may not have
 * been appended.
 */
const PUBLISH_TIMEOUT_MS = 1_000;
/** What the bound allows on top of `publishTimeoutMs`: timers and a busy machine, not a performance figure. */
const MARGIN_MS = 2_000;
/**
 * `replication.timeoutMs`: a `WAIT` holds the commands behind it on the connection for up to this long
 * (no replica confirms here), so it stays well below `publishTimeoutMs`.
 */
const WAIT_MS = 200;

/**
 * A TCP proxy to the test Redis that can cut the path silently: both sides of
 * every connection stop being read (nothing is forwarded, nothing is closed,
 * no RST), as when a network drops packets. Bytes read before the cut are
 * held and forwarded when it heals, as TCP would retransmit them.
 */
class SilentCutProxy {
  private readonly server: Server;
  private readonly pairs: Array<{ client: Socket; upstream: Socket; held: Array<{ to: Socket; chunk: Buffer }> }> = [];
  private cut = false;

  constructor(
    private readonly target: { host: string; port: number },
    readonly port = 0,
  ) {
    this.server = createServer((client) => this.accept(client));
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    const address = this.server.address();
    if (typeof address !== 'object' || address === null) throw new Error('proxy has no address');
    return `redis://127.0.0.1:${address.port}`;
  }

  silence(): void {
    this.cut = true;
    for (const { client, upstream } of this.pairs) {
      client.pause();
      upstream.pause();
    }
  }

  heal(): void {
    this.cut = false;
    for (const pair of this.pairs) {
      for (const { to, chunk } of pair.held.splice(0)) to.write(chunk);
      pair.client.resume();
      pair.upstream.resume();
    }
  }

  async close(): Promise<void> {
    for (const { client, upstream } of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    const upstream = new Socket();
    const pair = { client, upstream, held: [] as Array<{ to: Socket; chunk: Buffer }> };
    this.pairs.push(pair);
    const forward = (from: Socket, to: Socket): void => {
      from.on('data', (chunk: Buffer) => {
        if (this.cut) pair.held.push({ to, chunk });
        else to.write(chunk);
      });
      from.on('error', () => to.destroy());
      from.on('close', () => to.destroy());
    };
    forward(client, upstream);
    forward(upstream, client);
    upstream.connect(this.target.port, this.target.host);
    if (this.cut) {
      client.pause();
      upstream.pause();
    }
  }
}

/** How `work` settled within `ms`, and when: a promise still pending then is reported as such, not awaited further. */
async function settledWithin<T>(
  work: Promise<T>,
  ms: number,
): Promise<
  { state: 'resolved'; value: T; elapsedMs: number } | { state: 'rejected'; error: unknown; elapsedMs: number } | { state: 'pending' }
> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<{ state: 'pending' }>((resolve) => (timer = setTimeout(() => resolve({ state: 'pending' }), ms)));
  try {
    return await Promise.race([
      work.then(
        (value) => ({ state: 'resolved' as const, value, elapsedMs: performance.now() - started }),
        (error: unknown) => ({ state: 'rejected' as const, error, elapsedMs: performance.now() - started }),
      ),
      pending,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

describe('publish over a silently dropped connection', () => {
  const prefix = uniquePrefix('publish-timeout');
  const keys = new EventrailKeys(prefix, 1);
  const url = new URL(testRedisUrl());
  const proxy = new SilentCutProxy({ host: url.hostname, port: Number(url.port) });
  let redis: Redis;
  let app: INestApplicationContext;
  let cold: INestApplicationContext;
  let publisher: EventrailPublisher;

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    const proxied = await proxy.listen();
    const options = {
      redis: proxied,
      prefix,
      publishTimeoutMs: PUBLISH_TIMEOUT_MS,
      dedupWindowMs: 600_000,
      replication: { timeoutMs: WAIT_MS },
    };
    app = await createApp(options);
    publisher = app.get(EventrailPublisher);
    // The first publishMany asks whether the append scripts run here; a second one runs as scripts.
    await publisher.publishMany([{ event: 'warm', data: 1 }]);
    await publisher.publishMany([1, 2].map((n) => ({ event: 'warm', data: n })));
    // One that has not asked yet: its first publishMany waits for that answer, which the cut holds back too.
    cold = await createApp(options);
  });
  afterAll(async () => {
    proxy.heal();
    await app?.close();
    await cold?.close();
    await proxy.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  /** Every entry of the log: its `id` field ('' when the id is derived from its position), event and data. */
  async function entries(): Promise<Array<{ id: string; event: string; data: string }>> {
    const raw = await redis.xrange(keys.stream(0), '-', '+');
    return raw.map(([, fields]) => {
      const map = new Map<string, string>();
      for (let i = 0; i < fields.length; i += 2) map.set(fields[i], fields[i + 1]);
      return { id: map.get('id') ?? '', event: map.get('event') ?? '', data: map.get('data') ?? '' };
    });
  }

  it('rejects publish and publishMany with a typed error within publishTimeoutMs, and publishes again once the path heals', async () => {
    proxy.silence();
    const bound = PUBLISH_TIMEOUT_MS + MARGIN_MS;

    // Three at once: the first leaves on its own, the next two are coalesced; one has its own id (the dedup script).
    const calls = [
      publisher.publish('cut.plain', { n: 1 }),
      publisher.publish('cut.plain', { n: 2 }),
      publisher.publish('cut.with-id', { n: 3 }, { id: 'cut-3' }),
    ];
    const outcomes = await Promise.all(calls.map((call) => settledWithin(call, bound)));
    // The cut is silent: the connection still looks usable.
    expect(app.get(EventrailRedis).client.status).toBe('ready');
    for (const outcome of outcomes) {
      expect(outcome.state).toBe('rejected');
      if (outcome.state !== 'rejected') continue;
      expect(outcome.error).toBeInstanceOf(PublishTimeoutError);
      expect(outcome.error).toBeInstanceOf(RedisUnavailableError);
      expect((outcome.error as PublishTimeoutError).timeoutMs).toBe(PUBLISH_TIMEOUT_MS);
      expect((outcome.error as PublishTimeoutError).sent).toBe(true);
      expect((outcome.error as Error).message).toMatch(/may or may not have been appended/);
      expect(outcome.elapsedMs).toBeGreaterThanOrEqual(PUBLISH_TIMEOUT_MS - 50);
    }

    const many = await settledWithin(
      publisher.publishMany([1, 2, 3].map((n) => ({ event: 'cut.many', data: { n }, id: `many-${n}` }))),
      bound,
    );
    expect(many.state).toBe('rejected');
    if (many.state === 'rejected') {
      expect(many.error).toBeInstanceOf(PublishManyError);
      const error = many.error as PublishManyError;
      expect(error.outcomes).toEqual(['unknown', 'unknown', 'unknown']);
      expect(error.cause).toBeInstanceOf(PublishTimeoutError);
      expect(error.message).toMatch(/may or may not have been appended/);
    }

    // Waiting for replicas adds the WAIT's own timeout (replication.timeoutMs) to the bound.
    const replicated = await settledWithin(publisher.publish('cut.replicated', { n: 5 }, { durability: 'replicated' }), bound + WAIT_MS);
    expect(replicated.state).toBe('rejected');
    if (replicated.state === 'rejected') {
      expect(replicated.error).toBeInstanceOf(PublishTimeoutError);
      expect((replicated.error as PublishTimeoutError).timeoutMs).toBe(PUBLISH_TIMEOUT_MS + WAIT_MS);
      expect(replicated.elapsedMs).toBeGreaterThanOrEqual(PUBLISH_TIMEOUT_MS + WAIT_MS - 50);
    }

    // A publisher that never asked whether the scripts run sends nothing until it knows: nothing was appended.
    const coldMany = await settledWithin(
      cold.get(EventrailPublisher).publishMany([1, 2].map((n) => ({ event: 'cut.cold', data: { n } }))),
      bound,
    );
    expect(coldMany.state).toBe('rejected');
    if (coldMany.state === 'rejected') {
      expect(coldMany.error).toBeInstanceOf(PublishManyError);
      expect((coldMany.error as PublishManyError).outcomes).toEqual(['not-appended', 'not-appended']);
      expect((coldMany.error as PublishManyError).cause).toBeInstanceOf(PublishTimeoutError);
      expect(((coldMany.error as PublishManyError).cause as PublishTimeoutError).sent).toBe(false);
    }

    proxy.heal();
    const after = await settledWithin(publisher.publish('healed', { n: 4 }), 10_000);
    expect(after.state).toBe('resolved');
    // The events whose outcome was unknown are published again with their ids: dedup appends each once.
    await publisher.publish('cut.with-id', { n: 3 }, { id: 'cut-3' });
    await publisher.publishMany([1, 2, 3].map((n) => ({ event: 'cut.many', data: { n }, id: `many-${n}` })));
    await expect(cold.get(EventrailPublisher).publishMany([{ event: 'healed.cold', data: 1 }])).resolves.toHaveLength(1);

    const log = await waitFor(async () => {
      const all = await entries();
      return all.some((e) => e.event === 'healed.cold') ? all : undefined;
    }, 'the log to hold what was published after the path healed');
    const count = (predicate: (e: { id: string; event: string; data: string }) => boolean): number => log.filter(predicate).length;
    // Retried with their ids: exactly once each, whatever the cut did to the first try.
    expect(count((e) => e.id === 'cut-3')).toBe(1);
    for (const n of [1, 2, 3]) expect(count((e) => e.id === `many-${n}`)).toBe(1);
    // Not retried: at most once each (held back by the cut, they may land once it heals).
    for (const n of [1, 2]) expect(count((e) => e.event === 'cut.plain' && JSON.parse(e.data).n === n)).toBeLessThanOrEqual(1);
    expect(count((e) => e.event === 'cut.replicated')).toBeLessThanOrEqual(1);
    // Refused before anything was sent: never appended.
    expect(count((e) => e.event === 'cut.cold')).toBe(0);
    expect(count((e) => e.event === 'healed')).toBe(1);
  });
});

describe('TCP keepalive on the connections eventrail opens', () => {
  let app: INestApplicationContext;
  afterAll(async () => app?.close());

  /** The kernel's keepalive timer of the connection from `localPort`, in seconds left, as `ss` shows it; undefined without one. */
  async function keepaliveSeconds(localPort: number): Promise<number | undefined> {
    const { stdout } = await promisify(execFile)('ss', ['-tnoH', 'state', 'established', `( sport = :${localPort} )`]);
    const timer = /timer:\(keepalive,([\d.]+)(ms|sec|min)/.exec(stdout);
    if (!timer) return undefined;
    return Number(timer[1]) * { ms: 0.001, sec: 1, min: 60 }[timer[2] as 'ms' | 'sec' | 'min'];
  }

  it('probes an idle connection after 10 s, on the client and on its duplicates (blocking reads)', async () => {
    app = await createApp({ prefix: uniquePrefix('keepalive') });
    const redis = app.get(EventrailRedis);
    const duplicate = redis.duplicate() as Redis;
    await duplicate.ping();
    for (const connection of [redis.client as Redis, duplicate]) {
      const localPort = (connection as unknown as { stream: Socket }).stream.localPort as number;
      const seconds = await keepaliveSeconds(localPort);
      expect(seconds).toBeDefined();
      expect(seconds).toBeLessThanOrEqual(10);
    }
  });
});

describe('publishTimeoutMs', () => {
  it.each([0, -1, 1.5, '1000', Number.POSITIVE_INFINITY])('refuses %p with an InvalidOptionError naming it', (value) => {
    let thrown: unknown;
    try {
      resolveModuleOptions({ publishTimeoutMs: value as number }, {});
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InvalidOptionError);
    expect((thrown as InvalidOptionError).option).toBe('publishTimeoutMs');
  });

  it('defaults to 10000 ms', () => {
    expect(resolveModuleOptions({}, {}).publishTimeoutMs).toBe(10_000);
  });
});
