import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailPublisher, PublishInput, PublishManyError, PublishResult } from '../../lib';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { AppendOnceProxy } from './support/append-once-proxy';

/**
 * Attacks on "a publishMany of up to 1000 events made as the connection
 * closes (ioredis still 'ready', its socket no longer writable) goes as one
 * transaction, waiting whole in ioredis's offline queue" (commit cd6d2df,
 * docs/guide/publishing.md "How it is sent"), written by a session that did
 * not write the code. Each test ends the client's socket (`socket.end()`,
 * as the suite that holds the moment does) and makes its calls in the same
 * tick, then reads the log back through a connection of its own: each
 * transaction whole or absent, call order per partition, an `appended`
 * outcome at its own offset, nothing landing after a call was reported.
 *
 * Outcome: the promise held under every attack here (no failing test). Runs
 * (> 1000 events), transactions and coalesced publish calls in the window
 * land whole and in call order; the offline queue survives refused
 * reconnects (ioredis's abortTransactionFragments stops at the MULTI part);
 * a flush by maxRetriesPerRequest or enableOfflineQueue false fails the
 * calls with nothing appended, then or later; db 3 / RESP3 hold; a late
 * refusal discards, a late big entry goes as runs; a lost reply on the new
 * connection, at any cut, leaves the transaction once and `unknown`.
 */
const PARTITIONS = 4;

interface Copy {
  partition: number;
  offset: string;
}

describe('a publishMany made as the connection closes (attack)', () => {
  let server: RedisServer;
  let admin: Redis;
  let proxy: AppendOnceProxy;
  const apps: INestApplicationContext[] = [];
  const extra: Redis[] = [];

  beforeAll(async () => {
    server = await startRedisServer();
    admin = new Redis(server.url);
    proxy = await AppendOnceProxy.start(server.port);
  });
  // Each test's app is closed after it: its connections through the proxy would otherwise reconnect when a later
  // test drops them, taking that test's refused connection or passed replies.
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close().catch(() => undefined)));
    proxy.refuseNext(0);
    proxy.drop();
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close().catch(() => undefined)));
    await proxy?.close();
    for (const one of extra) one.disconnect();
    admin?.disconnect();
    await server?.stop();
  });

  async function publisherOf(
    prefix: string,
    redis: Record<string, unknown> = {},
  ): Promise<{ publisher: EventrailPublisher; client: Redis }> {
    const app = await createApp({
      redis: { host: '127.0.0.1', port: proxy.port, ...redis } as never,
      prefix,
      partitions: PARTITIONS,
    });
    apps.push(app);
    const publisher = app.get(EventrailPublisher);
    // Scripts asked about, and a transaction answered on this connection (later ones are written in parts).
    await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n }, partition: n })));
    await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n }, partition: n })));
    return { publisher, client: app.get(EventrailRedis).client as Redis };
  }

  /** Ends the client's socket: the moment before ioredis's close handler (ready, not writable); answers its next 'ready'. */
  function closing(client: Redis): Promise<void> {
    const ready = new Promise<void>((resolve) => client.once('ready', () => resolve()));
    const socket = (client as unknown as { stream: { end(): void; writable: boolean } }).stream;
    socket.end();
    expect({ status: client.status, writable: socket.writable }).toEqual({ status: 'ready', writable: false });
    return ready;
  }

  /** Every copy of each event named `event` in the log, by `tag/n`, in stream order per partition. */
  async function logOf(prefix: string, on: Redis = admin, event?: string): Promise<Array<{ key: string; copy: Copy }>> {
    const keys = new EventrailKeys(prefix, PARTITIONS);
    const found: Array<{ key: string; copy: Copy }> = [];
    for (let p = 0; p < PARTITIONS; p++) {
      let from = '-';
      for (;;) {
        const chunk = await on.xrange(keys.stream(p), from, '+', 'COUNT', 2000);
        for (const [offset, fields] of chunk) {
          const name = fields[fields.indexOf('event') + 1];
          if (name === 'warm' || name === 'step' || (event && name !== event)) continue;
          const { tag, n } = JSON.parse(fields[fields.indexOf('data') + 1]) as { tag: string; n: number };
          found.push({ key: `${tag}/${n}`, copy: { partition: p, offset } });
        }
        if (chunk.length < 2000) break;
        from = `(${chunk[chunk.length - 1][0]}`;
      }
    }
    return found;
  }

  const inputsOf = (tag: string, count: number, event = 'w', partition = (n: number) => (n * 7) % PARTITIONS): PublishInput[] =>
    Array.from({ length: count }, (_, n) => ({ event, data: { tag, n }, partition: partition(n) }));

  /** The `tag/n` keys of `calls` (in call order) as the log must hold them: per partition, in call order. */
  function expectedOrder(calls: PublishInput[][]): string[] {
    const byPartition: string[][] = Array.from({ length: PARTITIONS }, () => []);
    for (const call of calls)
      for (const input of call) {
        const { tag, n } = input.data as { tag: string; n: number };
        byPartition[input.partition as number].push(`${tag}/${n}`);
      }
    return byPartition.flat();
  }

  /** Each `appended` result at its own offset; answers the failures found. */
  function checkResults(inputs: PublishInput[], outcome: unknown, log: Array<{ key: string; copy: Copy }>): string[] {
    const at = new Map<string, Copy[]>();
    for (const { key, copy } of log) at.set(key, [...(at.get(key) ?? []), copy]);
    const wrong: string[] = [];
    const outcomes: string[] = Array.isArray(outcome)
      ? inputs.map(() => 'appended')
      : outcome instanceof PublishManyError
        ? [...outcome.outcomes]
        : inputs.map(() => `thrown ${String(outcome)}`);
    const results: Array<PublishResult | undefined> = Array.isArray(outcome)
      ? (outcome as PublishResult[])
      : outcome instanceof PublishManyError
        ? [...outcome.results]
        : [];
    inputs.forEach((input, i) => {
      const { tag, n } = input.data as { tag: string; n: number };
      const mine = at.get(`${tag}/${n}`) ?? [];
      if (mine.length > 1) wrong.push(`${tag}/${n}: ${mine.length} copies`);
      if (outcomes[i] === 'appended') {
        const r = results[i];
        if (!r || mine.length !== 1 || mine[0].offset !== r.offset || mine[0].partition !== r.partition)
          wrong.push(`${tag}/${n}: appended at ${r?.partition}/${r?.offset}, log ${JSON.stringify(mine)}`);
      } else if (outcomes[i] === 'not-appended' && mine.length > 0) wrong.push(`${tag}/${n}: not-appended, in the log`);
    });
    return wrong;
  }

  /** A publish after the trouble answers its own offset (the reply queue is in step). */
  async function assertInStep(publisher: EventrailPublisher, client: Redis, prefix: string, tag: string, on: Redis = admin): Promise<void> {
    await waitFor(() => client.status === 'ready', 'ready again');
    const keys = new EventrailKeys(prefix, PARTITIONS);
    for (let i = 0; i < 3; i++) {
      const result = await publisher.publish('step', { tag, i }, { partition: i % PARTITIONS });
      const [entry] = await on.xrange(keys.stream(result.partition), result.offset, result.offset);
      expect(entry?.[1]?.[entry[1].indexOf('data') + 1]).toBe(JSON.stringify({ tag, i }));
    }
    const many = await publisher.publishMany([0, 1, 2].map((i) => ({ event: 'step', data: { tag, i, many: true }, partition: i })));
    for (const [i, result] of many.entries()) {
      const [entry] = await on.xrange(keys.stream(result.partition), result.offset, result.offset);
      expect(entry?.[1]?.[entry[1].indexOf('data') + 1]).toBe(JSON.stringify({ tag, i, many: true }));
    }
    expect(await client.ping(`in-step-${tag}`)).toBe(`in-step-${tag}`);
  }

  // ---------------------------------------------------------------------------------------------

  it('several publishMany calls (runs and transactions) and coalesced publish calls in the window: all land, in call order, each at its offset', async () => {
    const prefix = uniquePrefix('closing-mixed');
    const { publisher, client } = await publisherOf(prefix);
    const a = inputsOf('a', 1200);
    const b = inputsOf('b', 300);
    const singles = inputsOf('s', 12);
    const c = inputsOf('c', 50);
    const d = inputsOf('d', 1000);
    const e = inputsOf('e', 1100);
    void closing(client);
    const calls: Array<Promise<unknown>> = [publisher.publishMany(a), publisher.publishMany(b)];
    for (const s of singles) calls.push(publisher.publish(s.event, s.data, { partition: s.partition }).then((r) => [r]));
    calls.push(publisher.publishMany(c), publisher.publishMany(d), publisher.publishMany(e));
    const outcomes = await Promise.all(calls.map((call) => call.catch((error: unknown) => error)));
    const log = await logOf(prefix);
    expect(log.map(({ key }) => key)).toEqual(expectedOrder([a, b, ...singles.map((s) => [s]), c, d, e]));
    const groups = [a, b, ...singles.map((s) => [s]), c, d, e];
    expect(groups.flatMap((inputs, i) => checkResults(inputs, outcomes[i], log))).toEqual([]);
    await assertInStep(publisher, client, prefix, 'mixed');
  });

  it('the window, then a reconnect refused and maxRetriesPerRequest 1 (ioredis flushes its offline queue with an error): rejected, nothing appended, nothing lands later', async () => {
    const prefix = uniquePrefix('closing-flushed');
    const { publisher, client } = await publisherOf(prefix, { maxRetriesPerRequest: 1 });
    const b = inputsOf('b', 300);
    const c = inputsOf('c', 40);
    const a = inputsOf('a', 1100);
    proxy.refuseNext(1);
    void closing(client);
    const calls = [publisher.publishMany(b), publisher.publishMany(a), publisher.publishMany(c)].map((call) =>
      call.catch((error: unknown) => error),
    );
    const outcomes = await Promise.all(calls);
    expect(outcomes.map((outcome) => outcome instanceof PublishManyError)).toEqual([true, true, true]);
    for (const outcome of outcomes) expect((outcome as PublishManyError).outcomes.filter((o) => o === 'appended')).toEqual([]);
    expect(proxy.refused).toBeGreaterThanOrEqual(1);
    // The connection comes back; what follows lands, and nothing of the flushed calls lands behind it.
    await assertInStep(publisher, client, prefix, 'flushed');
    expect(await logOf(prefix)).toEqual([]);
  });

  it('the window, with reconnects refused three times (the offline queue survives closes): each transaction lands whole, once', async () => {
    const prefix = uniquePrefix('closing-refused');
    const { publisher, client } = await publisherOf(prefix, { maxRetriesPerRequest: 10 });
    const b = inputsOf('b', 300);
    const c = inputsOf('c', 700);
    const singles = inputsOf('s', 5);
    const refusedBefore = proxy.refused;
    proxy.refuseNext(3);
    void closing(client);
    const calls: Array<Promise<unknown>> = [publisher.publishMany(b)];
    for (const s of singles) calls.push(publisher.publish(s.event, s.data, { partition: s.partition }).then((r) => [r]));
    calls.push(publisher.publishMany(c));
    const outcomes = await Promise.all(calls.map((call) => call.catch((error: unknown) => error)));
    expect(proxy.refused - refusedBefore).toBe(3);
    const log = await logOf(prefix);
    expect(log.map(({ key }) => key)).toEqual(expectedOrder([b, ...singles.map((s) => [s]), c]));
    expect([b, ...singles.map((s) => [s]), c].flatMap((inputs, i) => checkResults(inputs, outcomes[i], log))).toEqual([]);
    await assertInStep(publisher, client, prefix, 'refused');
  });

  it('enableOfflineQueue false in the window: the call fails, nothing of it lands', async () => {
    const prefix = uniquePrefix('closing-no-offline');
    const { publisher, client } = await publisherOf(prefix, { enableOfflineQueue: false });
    const b = inputsOf('b', 300);
    const a = inputsOf('a', 1100);
    const ready = closing(client);
    const outcomes = await Promise.all(
      [publisher.publishMany(b), publisher.publishMany(a)].map((call) => call.catch((error: unknown) => error)),
    );
    await ready;
    expect(outcomes.map((outcome) => outcome instanceof PublishManyError)).toEqual([true, true]);
    await assertInStep(publisher, client, prefix, 'no-offline');
    const log = await logOf(prefix);
    expect([b, a].flatMap((inputs, i) => checkResults(inputs, outcomes[i], log))).toEqual([]);
    expect(log).toEqual([]);
  });

  it('db 3 and RESP3 in the window: the transaction lands whole in its own db, replies in step', async () => {
    for (const [tag, options] of [
      ['db3', { db: 3 }],
      ['resp3', { protocol: 3 }],
      ['db3-resp3', { db: 3, protocol: 3 }],
    ] as const) {
      const prefix = uniquePrefix(`closing-${tag}`);
      const db = (options as { db?: number }).db ?? 0;
      const on = new Redis({ host: '127.0.0.1', port: server.port, db });
      extra.push(on);
      const { publisher, client } = await publisherOf(prefix, options);
      const b = inputsOf('b', 300);
      const singles = inputsOf('s', 4);
      void closing(client);
      const calls: Array<Promise<unknown>> = [publisher.publishMany(b)];
      for (const s of singles) calls.push(publisher.publish(s.event, s.data, { partition: s.partition }).then((r) => [r]));
      const outcomes = await Promise.all(calls.map((call) => call.catch((error: unknown) => error)));
      const log = await logOf(prefix, on);
      expect({ tag, keys: log.map(({ key }) => key) }).toEqual({ tag, keys: expectedOrder([b, ...singles.map((s) => [s])]) });
      expect([b, ...singles.map((s) => [s])].flatMap((inputs, i) => checkResults(inputs, outcomes[i], log))).toEqual([]);
      if (db !== 0) expect(await logOf(prefix)).toEqual([]);
      await assertInStep(publisher, client, prefix, tag, on);
    }
  });

  it('in the window, a transaction written in parts whose data fails late appends nothing; one with a big entry late lands whole and in order', async () => {
    const prefix = uniquePrefix('closing-late');
    const { publisher, client } = await publisherOf(prefix);
    let reads = 0;
    const throwing: PublishInput[] = Array.from({ length: 300 }, (_, n) => ({
      event: 'late',
      data:
        n === 249
          ? {
              tag: 'late',
              get n(): number {
                if (++reads > 1) throw new Error('read twice');
                return n;
              },
            }
          : { tag: 'late', n },
      partition: n % PARTITIONS,
    }));
    const withBig: PublishInput[] = Array.from({ length: 300 }, (_, n) => ({
      event: 'big',
      data: n === 250 ? { tag: 'big', n, big: 'x'.repeat(20_000) } : { tag: 'big', n },
      partition: n % PARTITIONS,
    }));
    const after = inputsOf('after', 200);
    void closing(client);
    const outcomes = await Promise.all(
      [publisher.publishMany(throwing), publisher.publishMany(withBig), publisher.publishMany(after)].map((call) =>
        call.catch((error: unknown) => error),
      ),
    );
    expect(outcomes[0]).toBeInstanceOf(PublishManyError);
    expect((outcomes[0] as PublishManyError).outcomes).toEqual(throwing.map(() => 'not-appended'));
    const log = await logOf(prefix);
    expect(log.filter(({ key }) => key.startsWith('late/'))).toEqual([]);
    expect(log.map(({ key }) => key)).toEqual(expectedOrder([withBig, after]));
    expect([withBig, after].flatMap((inputs, i) => checkResults(inputs, outcomes[i + 1], log))).toEqual([]);
    await assertInStep(publisher, client, prefix, 'late');
  });

  it('the window, then the new connection loses the transaction’s replies at every cut and drops: it lands whole and once, reported may-or-may-not', async () => {
    const prefix = uniquePrefix('closing-lost');
    const { publisher, client } = await publisherOf(prefix);
    // Calibrate: how many replies the new connection's handshake takes before the offline queue is sent.
    const calibration = inputsOf('cal', 300);
    void closing(client);
    const calibrated = publisher.publishMany(calibration);
    proxy.loseRepliesAfter(100_000);
    expect(checkResults(calibration, await calibrated, await logOf(prefix))).toEqual([]);
    // MULTI's OK, 300 QUEUED, EXEC's array.
    const handshake = 100_000 - proxy.passingOnLatest() - 302;
    proxy.loseRepliesAfter(Infinity);
    expect(handshake).toBeGreaterThanOrEqual(0);
    for (const cut of [0, 1, 2, 150, 300, 301]) {
      await waitFor(() => client.status === 'ready', 'ready');
      const tag = `cut${cut}`;
      const inputs = inputsOf(tag, 300);
      void closing(client);
      const outcome = publisher.publishMany(inputs).catch((error: unknown) => error);
      proxy.loseRepliesAfter(handshake + cut);
      await waitFor(async () => (await logOf(prefix)).filter(({ key }) => key.startsWith(`${tag}/`)).length >= 300, `${tag} appended`);
      proxy.drop();
      const settled = await outcome;
      await assertInStep(publisher, client, prefix, tag);
      const log = await logOf(prefix);
      expect({ cut, count: log.filter(({ key }) => key.startsWith(`${tag}/`)).length }).toEqual({ cut, count: 300 });
      expect({ cut, wrong: checkResults(inputs, settled, log) }).toEqual({ cut, wrong: [] });
      expect({ cut, rejected: settled instanceof PublishManyError }).toEqual({ cut, rejected: true });
    }
  });
});
