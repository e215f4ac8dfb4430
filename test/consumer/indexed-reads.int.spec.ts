import { Injectable, INestApplicationContext, Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { BIG_ENTRY_BYTES } from '../../lib/redis/big-entries';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { EventrailScripts } from '../../lib/redis/eventrail-scripts';
import { EventrailKeys } from '../../lib/redis/keys';
import { redeliver } from '../../lib/redelivery/redelivery';
import { createApp } from '../support/app';
import { entrySizes } from '../support/entry-sizes';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';

const KEYS = 5;
const MIB = 1024 * 1024;

const handled: number[] = [];

@Injectable()
class Reader {
  @OnEvent(['small', 'big'], { group: 'reader', ordering: 'key' })
  handle(message: EventrailMessage<{ n: number }>): void {
    handled.push(message.data.n);
  }
}

/** The ids of every reply of each kind of read a worker sent: plain XRANGE, the read script, XREAD. The calls go through. */
function recordReads(): { plain: string[][]; script: string[][]; xread: string[][]; asked: number } {
  const reads = { plain: [] as string[][], script: [] as string[][], xread: [] as string[][], asked: 0 };
  const readRange = EventrailScripts.readRange.bind(EventrailScripts);
  const readBacklog = EventrailScripts.readBacklog.bind(EventrailScripts);
  const readStream = EventrailScripts.readStream.bind(EventrailScripts);
  const readIndex = EventrailScripts.readIndex.bind(EventrailScripts);
  jest.spyOn(EventrailScripts, 'readRange').mockImplementation(async (...args) => {
    const reply = await readRange(...args);
    reads.plain.push(reply.map(([id]) => id.toString()));
    return reply;
  });
  jest.spyOn(EventrailScripts, 'readBacklog').mockImplementation(async (...args) => {
    const read = await readBacklog(...args);
    reads.script.push(read.entries.map(([id]) => id.toString()));
    return read;
  });
  jest.spyOn(EventrailScripts, 'readStream').mockImplementation(async (...args) => {
    const reply = await readStream(...args);
    reads.xread.push((reply?.[0][1] ?? []).map(([id]) => id.toString()));
    return reply;
  });
  jest.spyOn(EventrailScripts, 'readIndex').mockImplementation(async (...args) => {
    reads.asked++;
    return readIndex(...args);
  });
  return reads;
}

/** Every number below `total` once, and each key's (n mod KEYS) numbers in publish order. */
function expectOnceInKeyOrder(got: number[], total: number): void {
  expect([...got].sort((a, b) => a - b)).toEqual([...Array(total).keys()]);
  for (let k = 0; k < KEYS; k++) {
    const ofKey = got.filter((m) => m % KEYS === k);
    expect(ofKey).toEqual([...ofKey].sort((a, b) => a - b));
  }
}

/**
 * Reads between big entries: while behind, a worker reads plain XRANGE up to the next entry the
 * partition's index says is big (readIndex-3.lua), so the read script's Lua copy of every entry is
 * paid only where the index cannot tell.
 */
describe('reads between indexed big entries', () => {
  let server: RedisServer;
  let redis: Redis;
  let app: INestApplicationContext | undefined;

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
  });
  beforeEach(() => void (handled.length = 0));
  afterEach(async () => {
    jest.restoreAllMocks();
    await app?.close();
    app = undefined;
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  /** Publishes `sizes` (payload bytes) every way eventrail appends, by seed: lone publishes, concurrent ones, publishMany with and without ids. */
  async function publishEveryWay(publisher: EventrailPublisher, sizes: number[], seed: number): Promise<void> {
    const random = seededRandom(seed);
    const input = (n: number) => ({
      event: sizes[n] > BIG_ENTRY_BYTES ? 'big' : 'small',
      data: { n, blob: 'x'.repeat(sizes[n]) },
      key: `k${n % KEYS}`,
    });
    for (let n = 0; n < sizes.length;) {
      const way = Math.floor(random() * 4);
      const count = Math.min(sizes.length - n, 1 + Math.floor(random() * 40));
      const batch = Array.from({ length: count }, (_, i) => input(n + i));
      if (way === 0) for (const one of batch) await publisher.publish(one.event, one.data, { key: one.key });
      else if (way === 1) await Promise.all(batch.map((one) => publisher.publish(one.event, one.data, { key: one.key })));
      else if (way === 2) await publisher.publishMany(batch);
      else await publisher.publishMany(batch.map((one) => ({ ...one, id: `id-${seed}-${one.data.n}` })));
      n += count;
    }
  }

  it('indexes exactly the entries over BIG_ENTRY_BYTES, whichever way they were appended, over 12 generated logs', async () => {
    for (let seed = 1; seed <= 12; seed++) {
      const prefix = uniquePrefix(`index${seed}`);
      app = await createApp({ redis: server.url, prefix, partitions: 2, dedupWindowMs: seed % 2 ? 60_000 : 0, autoStart: false }, []);
      const random = seededRandom(1000 + seed);
      // Around the line: sizes from 15 KiB to 17 KiB, and some far from it.
      const sizes = Array.from({ length: 150 }, () =>
        random() < 0.7 ? BIG_ENTRY_BYTES - 1200 + Math.floor(random() * 2400) : Math.floor(random() * 3 * BIG_ENTRY_BYTES),
      );
      await publishEveryWay(app.get(EventrailPublisher), sizes, seed);
      const keys = new EventrailKeys(prefix, 2);
      // A redelivery of a big entry and of a small one goes in the index as a publish would.
      const [first] = await redis.xrange(keys.stream(0), '-', '+', 'COUNT', 1);
      expect(first).toBeDefined();
      for (let p = 0; p < 2; p++) {
        const indexed = new Set(await redis.zrange(keys.bigEntries(p), '0', '-1'));
        const sizesById = await entrySizes(redis, keys.stream(p));
        // The longest id there is counts, whatever this one's length: an entry that is not big weighs at most the line.
        const big = [...sizesById].filter(([id, bytes]) => bytes - id.length + 41 > BIG_ENTRY_BYTES).map(([id]) => id);
        expect([...indexed].sort()).toEqual(big.sort());
        for (const id of indexed) expect(Number(await redis.zscore(keys.bigEntries(p), id))).toBe(Number(id.split('-')[0]));
      }
      await app.close();
      app = undefined;
    }
  });

  it('a redelivered big entry is indexed as it is appended again', async () => {
    const prefix = uniquePrefix('redeliver');
    app = await createApp({ redis: server.url, prefix, partitions: 1, autoStart: false }, []);
    const keys = new EventrailKeys(prefix, 1);
    const { client } = app.get(EventrailRedis);
    const entry = {
      offset: '1-1',
      id: 'e1',
      event: 'big',
      key: 'k',
      time: 1,
      data: JSON.stringify({ blob: 'x'.repeat(2 * BIG_ENTRY_BYTES) }),
      headers: undefined,
      to: undefined,
    };
    const small = { ...entry, id: 'e2', data: '{}' };
    expect(
      await redeliver(client, keys, 'reader', [
        { partition: 0, entry },
        { partition: 0, entry: small },
      ]),
    ).toEqual([null, null]);
    const ids = (await redis.xrange(keys.stream(0), '-', '+')).map(([id]) => id);
    expect(await redis.zrange(keys.bigEntries(0), '0', '-1')).toEqual([ids[0]]);
  });

  it('a worker behind reads plain XRANGE between big entries: every entry once, per key in order, no plain reply of several entries over maxReadBytes, big ones alone', async () => {
    const prefix = uniquePrefix('plain');
    app = await createApp({ redis: server.url, prefix, partitions: 1, maxPayloadBytes: 4 * MIB, autoStart: false }, [Reader]);
    const random = seededRandom(77);
    // Mostly small entries, runs of big ones (up to 1 MiB), and a stretch of only big ones.
    const sizes = Array.from({ length: 3000 }, (_, n) =>
      n >= 1500 && n < 1540
        ? 200_000 + Math.floor(random() * MIB)
        : random() < 0.03
          ? BIG_ENTRY_BYTES + Math.floor(random() * MIB)
          : Math.floor(random() * 2000),
    );
    await publishEveryWay(app.get(EventrailPublisher), sizes, 5);
    const reads = recordReads();
    await app.get(EventrailConsumers).start();
    await waitFor(
      () => handled.length >= sizes.length,
      () => `${handled.length} of ${sizes.length} handled`,
    );
    expectOnceInKeyOrder(handled, sizes.length);
    const sizesById = await entrySizes(redis, new EventrailKeys(prefix, 1).stream(0));
    const bytes = (ids: string[]): number => ids.reduce((sum, id) => sum + sizesById.get(id)!, 0);
    const plain = reads.plain.filter((ids) => ids.length > 0);
    // Plain reads brought nearly everything; the script read nothing of it (the log was indexed from its start).
    expect(plain.flat().length).toBeGreaterThan(sizes.length * 0.9);
    expect(reads.script.flat()).toEqual([]);
    // Several entries: within the default maxReadBytes, each under the line; one entry over the line came alone.
    for (const ids of plain.filter((r) => r.length > 1)) {
      expect(bytes(ids)).toBeLessThanOrEqual(4 * MIB);
      for (const id of ids) expect(sizesById.get(id)!).toBeLessThanOrEqual(BIG_ENTRY_BYTES);
    }
    // The index was asked once per region, which ends at each big entry and at Redis's time: about twice per big entry.
    const big = sizes.filter((bytes) => bytes > BIG_ENTRY_BYTES).length;
    expect(reads.asked).toBeLessThanOrEqual(2 * big + 10);
  });

  it('a backlog without big entries is one region: the index is asked a few times, not once per read', async () => {
    const prefix = uniquePrefix('region');
    app = await createApp({ redis: server.url, prefix, partitions: 1, autoStart: false }, [Reader]);
    const publisher = app.get(EventrailPublisher);
    const total = 20_000;
    for (let n = 0; n < total; n += 1000)
      await publisher.publishMany(
        Array.from({ length: 1000 }, (_, i) => ({ event: 'small', data: { n: n + i }, key: `k${(n + i) % KEYS}` })),
      );
    const reads = recordReads();
    await app.get(EventrailConsumers).start();
    await waitFor(
      () => handled.length >= total,
      () => `${handled.length} of ${total} handled`,
    );
    expectOnceInKeyOrder(handled, total);
    expect(reads.plain.flat().length).toBeGreaterThan(total * 0.95);
    expect(reads.script.flat().length).toBe(0);
    expect(reads.asked).toBeLessThanOrEqual(5);
  });

  it('entries a writer appended without indexing them are read by the script: before the mark the first read sets, and after a plain read brought more than the bound (warned once)', async () => {
    const prefix = uniquePrefix('foreign');
    const keys = new EventrailKeys(prefix, 1);
    const stream = keys.stream(0);
    const blob = (bytes: number): string => JSON.stringify({ n: 0, blob: 'y'.repeat(bytes) });
    // A log written before eventrail indexed: big entries, raw, and no mark yet.
    let n = 0;
    for (let i = 0; i < 60; i++)
      await redis.xadd(
        stream,
        '*',
        'event',
        'small',
        'key',
        `k${n % KEYS}`,
        'data',
        blob(i % 10 === 0 ? 300_000 : 100).replace('"n":0', `"n":${n++}`),
      );
    app = await createApp({ redis: server.url, prefix, partitions: 1, maxPayloadBytes: 4 * MIB, autoStart: false }, [Reader]);
    const publisher = app.get(EventrailPublisher);
    for (let i = 0; i < 400; i++, n++) await publisher.publish('small', { n, blob: 'z'.repeat(100) }, { key: `k${n % KEYS}` });
    const warn = jest.spyOn(Logger.prototype, 'warn');
    const reads = recordReads();
    await app.get(EventrailConsumers).start();
    await waitFor(
      () => handled.length >= n,
      () => `${handled.length} of ${n} handled`,
    );
    // The first read asked the index, which set its mark at the last entry then: the raw ones before it went through the script.
    const mark = await redis.get(keys.indexedFrom(0));
    expect(mark).not.toBeNull();
    const sizesById = await entrySizes(redis, stream);
    const raw = [...sizesById.keys()].slice(0, 60);
    expect(reads.plain.flat().filter((id) => raw.includes(id))).toEqual([]);
    expect(reads.script.flat().length).toBeGreaterThan(0);

    // A raw big entry after the mark, among small ones: at most one plain read brings it with others, the worker says so once.
    handled.length = 0;
    const from = n;
    for (let i = 0; i < 300; i++, n++) {
      if (i % 50 === 25)
        await redis.xadd(stream, '*', 'event', 'small', 'key', `k${n % KEYS}`, 'data', blob(900_000).replace('"n":0', `"n":${n}`));
      else await publisher.publish('small', { n, blob: 'z'.repeat(100) }, { key: `k${n % KEYS}` });
    }
    await waitFor(
      () => handled.length >= n - from,
      () => `${handled.length} of ${n - from} handled`,
    );
    const after = await entrySizes(redis, stream);
    const over = reads.plain.filter((ids) => ids.length > 1 && ids.reduce((sum, id) => sum + after.get(id)!, 0) > 4 * MIB);
    expect(over.length).toBeLessThanOrEqual(1);
    const said = warn.mock.calls.map(([m]) => String(m)).filter((m) => m.includes('index of big entries does not know'));
    expect(said.length).toBeLessThanOrEqual(1);
    if (over.length === 1) expect(said).toHaveLength(1);
  });

  it('retention trims the index with the log', async () => {
    const prefix = uniquePrefix('trim');
    app = await createApp({ redis: server.url, prefix, partitions: 1, autoStart: false }, []);
    const publisher = app.get(EventrailPublisher);
    const keys = new EventrailKeys(prefix, 1);
    const offsets: string[] = [];
    for (let i = 0; i < 20; i++) offsets.push((await publisher.publish('big', { i, blob: 'x'.repeat(BIG_ENTRY_BYTES) })).offset);
    expect(await redis.zcard(keys.bigEntries(0))).toBe(20);
    const scripts = app.get(EventrailRedis).scripts;
    expect(await scripts.trimLog({ partition: 0, minId: offsets[12], approximate: false, sinkId: '', allowUnarchived: true })).toBe(12);
    // Scored by milliseconds: what is left is every id from the first entry's millisecond on.
    const left = await redis.zrange(keys.bigEntries(0), '0', '-1');
    const firstMs = Number(offsets[12].split('-')[0]);
    expect(left.every((id) => Number(id.split('-')[0]) >= firstMs)).toBe(true);
    expect(left).toEqual(expect.arrayContaining(offsets.slice(12)));
  });
});
