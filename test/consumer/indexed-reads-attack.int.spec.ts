import { Injectable, INestApplicationContext } from '@nestjs/common';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailConsumers, eventrailAclRules, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import type { MalformedEntry, RawEntry } from '../../lib/wire/codec';
import { PartitionReader, type PartitionReaderOptions } from '../../lib/consumer/pipeline/partition-reader';
import { BIG_ENTRY_BYTES, FRAME_BYTES } from '../../lib/redis/big-entries';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { EventrailScripts } from '../../lib/redis/eventrail-scripts';
import { EventrailKeys } from '../../lib/redis/keys';
import { createAclUser } from '../support/acl';
import { compareStreamIds } from '../../lib/wire/stream-id';
import { createApp } from '../support/app';
import { entrySizes } from '../support/entry-sizes';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';

const KEYS = 7;
const MIB = 1024 * 1024;
/** The longest stream id: what the writer counts for every entry's id (index-big.lua). */
const ID_BYTES = 41;

/** Numbers handled per group, in the order the handlers finished them. */
const seen = new Map<string, number[]>();
const note = (group: string, n: number): void => void (seen.get(group) ?? seen.set(group, []).get(group)!).push(n);
const got = (group: string): number[] => seen.get(group) ?? [];
/** Numbers whose first call fails once (their key is parked with 'key' ordering). */
const failOnce = new Set<number>();

@Injectable()
class Single {
  @OnEvent(['small', 'big'], { group: 'single', ordering: 'partition', maxReadBytes: 65_536, batchSize: 1 })
  handle(message: EventrailMessage<{ n: number }>): void {
    note('single', message.data.n);
  }
}

@Injectable()
class Line {
  // Exactly 32 entries of 16 KiB: the least bound that reads plainly, with the default batch.
  @OnEvent(['small', 'big'], { group: 'line', ordering: 'key', maxReadBytes: 524_288, batchSize: 200, enableIdempotency: true })
  handle(message: EventrailMessage<{ n: number }>): void {
    note('line', message.data.n);
  }
}

@Injectable()
class Odd {
  // An odd bound just over the line, a huge batch, calls side by side, keys parked by failures.
  @OnEvent(['small', 'big'], {
    group: 'odd',
    ordering: 'key',
    maxReadBytes: 600_001,
    batchSize: 10_000,
    concurrency: 3,
    enableIdempotency: true,
    redelivery: { delayMs: 20, maxDelayMs: 50 },
  })
  handle(message: EventrailMessage<{ n: number }>): void {
    if (failOnce.delete(message.data.n)) throw new Error(`first call of ${message.data.n} fails`);
    note('odd', message.data.n);
  }
}

@Injectable()
class Wide {
  // The default bound (4 MiB), a batch handler.
  @OnEvent(['small', 'big'], { group: 'wide', ordering: 'key', batchSize: 10_000, batch: { maxSize: 50 } })
  handle(messages: EventrailMessage<{ n: number }>[]): void {
    for (const message of messages) note('wide', message.data.n);
  }
}

/** Numbers that fail every call (dead-lettered at once in 'partition' ordering). */
const failAlways = new Set<number>();

@Injectable()
class Letters {
  @OnEvent(['small', 'big'], { group: 'letters', ordering: 'partition', maxRetries: 0, maxReadBytes: 524_288 })
  handle(message: EventrailMessage<{ n: number }>): void {
    if (failAlways.has(message.data.n)) throw new Error(`${message.data.n} fails`);
    note('letters', message.data.n);
  }
}

const GROUPS = ['single', 'line', 'odd', 'wide'];
const HANDLERS = [Single, Line, Odd, Wide];

type Entry = RawEntry | MalformedEntry;

/** One reply a reader took while behind: a plain XRANGE between big entries, or the byte-counting script. */
interface Reply {
  group: string;
  bound: number;
  kind: 'plain' | 'script';
  /** `<stream> <id>`: partitions may hold the same ids. */
  ids: string[];
}

/**
 * Records every reply a worker's reader took while behind (plain reads and script reads), with its group
 * and `maxReadBytes`, and the size of every entry Redis sent (as a worker counts it: id, names, values,
 * FRAME_BYTES each), by `<stream> <id>`. The calls go through.
 */
function recordReplies(): { replies: Reply[]; sizes: Map<string, number>; asked: number[] } {
  const replies: Reply[] = [];
  const sizes = new Map<string, number>();
  const asked: number[] = [];
  const note = (stream: string, raw: Array<[Buffer, Buffer[]]>): void => {
    for (const [id, fields] of raw) {
      sizes.set(
        `${stream} ${id.toString()}`,
        fields.reduce((sum, field) => sum + field.length + FRAME_BYTES, id.length + FRAME_BYTES),
      );
    }
  };
  const readRange = EventrailScripts.readRange.bind(EventrailScripts);
  const readBacklog = EventrailScripts.readBacklog.bind(EventrailScripts);
  const readStream = EventrailScripts.readStream.bind(EventrailScripts);
  const readIndex = EventrailScripts.readIndex.bind(EventrailScripts);
  jest.spyOn(EventrailScripts, 'readRange').mockImplementation(async (...args) => {
    const reply = await readRange(...args);
    note(args[1], reply);
    return reply;
  });
  jest.spyOn(EventrailScripts, 'readBacklog').mockImplementation(async (...args) => {
    const read = await readBacklog(...args);
    note(args[1], read.entries);
    return read;
  });
  jest.spyOn(EventrailScripts, 'readStream').mockImplementation(async (...args) => {
    const reply = await readStream(...args);
    note(args[1], reply?.[0]?.[1] ?? []);
    return reply;
  });
  jest.spyOn(EventrailScripts, 'readIndex').mockImplementation(async (...args) => {
    const answer = await readIndex(...args);
    asked.push(Number(answer.now));
    return answer;
  });
  type Method = (this: ReaderInternals, ...args: unknown[]) => Promise<Entry[] | undefined>;
  interface ReaderInternals {
    options: PartitionReaderOptions;
    stream: string;
  }
  const proto = PartitionReader.prototype as unknown as Record<'readIndexed' | 'readPacked', Method>;
  for (const [method, kind] of [
    ['readIndexed', 'plain'],
    ['readPacked', 'script'],
  ] as const) {
    const original = proto[method];
    jest.spyOn(proto, method).mockImplementation(async function (this: ReaderInternals, ...args: unknown[]) {
      const entries = await original.apply(this, args);
      if (entries && entries.length > 0) {
        replies.push({
          group: this.options.group,
          bound: this.options.maxReadBytes,
          kind,
          ids: entries.map((e) => `${this.stream} ${e.offset}`),
        });
      }
      return entries;
    });
  }
  return { replies, sizes, asked };
}

/**
 * What breaks the promise among `replies`: a reply of several entries over its group's bound, or a plain
 * reply of several entries holding a big one (one the index should have made come alone).
 */
function violations(replies: Reply[], sizes: Map<string, number>): string[] {
  const found: string[] = [];
  for (const reply of replies) {
    if (reply.ids.length < 2) continue;
    const bytes = reply.ids.reduce((sum, id) => sum + sizes.get(id)!, 0);
    if (bytes > reply.bound)
      found.push(`${reply.kind} read of ${reply.ids.length} entries, ${bytes} B, over ${reply.bound} (${reply.group})`);
    if (reply.kind !== 'plain') continue;
    const big = reply.ids.filter((id) => sizes.get(id)! - id.split(' ')[1].length + ID_BYTES > BIG_ENTRY_BYTES);
    if (big.length > 0) {
      found.push(
        `plain read of ${reply.ids.length} entries (${reply.group}) holds big ${big.map((id) => `${id} (${sizes.get(id)} B)`).join(', ')}`,
      );
    }
  }
  return found;
}

/** The entries of `stream` the index should hold (big as the writer counts them, with the longest id) against what it holds. */
async function indexMismatch(redis: Redis, keys: EventrailKeys, partition: number): Promise<{ missing: string[]; extra: string[] }> {
  const sizes = await entrySizes(redis, keys.stream(partition));
  const indexed = new Set(await redis.zrange(keys.bigEntries(partition), '0', '-1'));
  const big = [...sizes].filter(([id, bytes]) => bytes - id.length + ID_BYTES > BIG_ENTRY_BYTES).map(([id]) => id);
  return {
    missing: big.filter((id) => !indexed.has(id)),
    // Ids the index holds of entries still in the stream that are not big (trimmed ones may stay, scored in the first entry's ms).
    extra: [...indexed].filter((id) => sizes.has(id) && !big.includes(id)),
  };
}

/** Every number below `total` once, and each key's numbers in publish order. */
function onceInKeyOrder(group: string, numbers: number[], total: number): string[] {
  const problems: string[] = [];
  const sorted = [...numbers].sort((a, b) => a - b);
  const missing = [...Array(total).keys()].filter((n) => !numbers.includes(n));
  if (missing.length > 0) problems.push(`${group}: ${missing.length} never handled (${missing.slice(0, 5).join(',')}...)`);
  const twice = sorted.filter((n, i) => i > 0 && sorted[i - 1] === n);
  if (twice.length > 0) problems.push(`${group}: ${twice.length} handled twice (${twice.slice(0, 5).join(',')}...)`);
  for (let k = 0; k < KEYS; k++) {
    const ofKey = numbers.filter((m) => m % KEYS === k);
    const firstOut = ofKey.findIndex((m, i) => i > 0 && m < ofKey[i - 1]);
    if (firstOut > 0) problems.push(`${group}: key ${k} out of order at ${ofKey[firstOut - 1]} then ${ofKey[firstOut]}`);
  }
  return problems;
}

/** A string of about `bytes` UTF-8 bytes, of 1- to 4-byte characters (a surrogate pair for the 4). */
function utf8(random: () => number, bytes: number): string {
  const chars = ['a', 'é', '€', '😀', '"', '\\'];
  let out = '';
  let size = 0;
  while (size < bytes) {
    const c = chars[Math.floor(random() * chars.length)];
    out += c;
    size += Buffer.byteLength(c);
  }
  return out;
}

/** Payload sizes: mostly small, a tenth right around the line, a few big. */
function generateSizes(random: () => number, count: number, bigShare = 0.04, bigMost = 300_000): number[] {
  return Array.from({ length: count }, () => {
    const r = random();
    if (r < bigShare) return BIG_ENTRY_BYTES + Math.floor(random() * bigMost);
    if (r < bigShare + 0.12) return BIG_ENTRY_BYTES - 900 + Math.floor(random() * 1400);
    return Math.floor(random() * 3000);
  });
}

interface Published {
  event: string;
  data: { n: number; blob: string };
  key: string;
  headers?: Record<string, string>;
}

/** The n-th event, of about `bytes` of payload: multi-byte data, keys and headers, so sizes straddle the line in bytes, not in characters. */
function eventOf(random: () => number, n: number, bytes: number): Published {
  const headers = random() < 0.3 ? { trace: utf8(random, Math.floor(random() * 400)), ü: 'ü' } : undefined;
  return {
    event: bytes > BIG_ENTRY_BYTES ? 'big' : 'small',
    data: { n, blob: utf8(random, bytes) },
    key: `ключ-${n % KEYS}`,
    headers,
  };
}

/**
 * Publishes events `from` .. `from + sizes.length - 1` every way eventrail appends, by `random`: lone
 * publishes (with an id: the dedup script, when the app has a window), concurrent ones (coalesced),
 * publishMany without ids and with ids.
 */
async function publishEveryWay(publisher: EventrailPublisher, sizes: number[], random: () => number, from = 0): Promise<void> {
  for (let i = 0; i < sizes.length;) {
    const way = Math.floor(random() * 5);
    const count = Math.min(sizes.length - i, 1 + Math.floor(random() * 30));
    const batch = Array.from({ length: count }, (_, j) => eventOf(random, from + i + j, sizes[i + j]));
    const withId = (one: Published) => ({ ...one, id: `id-ü-${one.data.n}` });
    if (way === 0) for (const one of batch) await publisher.publish(one.event, one.data, { key: one.key, headers: one.headers });
    else if (way === 1) for (const one of batch.map(withId)) await publisher.publish(one.event, one.data, one);
    else if (way === 2)
      await Promise.all(batch.map((one) => publisher.publish(one.event, one.data, { key: one.key, headers: one.headers })));
    else if (way === 3) await publisher.publishMany(batch);
    else await publisher.publishMany(batch.map(withId));
    i += count;
  }
}

/**
 * Attacks on reads between indexed big entries (readIndex-3.lua): a worker that is behind reads plain
 * XRANGE up to the next big entry its partition's index holds, or Redis's time, and promises that no
 * read of several entries brings more than `maxReadBytes`, every entry handled once and per key in order.
 */
describe('reads between indexed big entries, attacked', () => {
  let server: RedisServer;
  let redis: Redis;
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
  });
  beforeEach(() => {
    seen.clear();
    failOnce.clear();
    failAlways.clear();
  });
  afterEach(async () => {
    jest.restoreAllMocks();
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  const start = async (prefix: string, options: Record<string, unknown> = {}, handlers = HANDLERS): Promise<INestApplicationContext> => {
    const app = await createApp(
      { redis: server.url, prefix, partitions: 1, maxPayloadBytes: 4 * MIB, autoStart: false, ...options },
      handlers,
    );
    apps.push(app);
    return app;
  };

  it('indexes exactly the entries over the line, sizes generated around it in bytes (multi-byte data, keys, headers, ids), every append path, with and without a dedup window', async () => {
    const problems: string[] = [];
    for (let seed = 1; seed <= 4; seed++) {
      const prefix = uniquePrefix(`utf8${seed}`);
      const app = await start(prefix, { partitions: 2, dedupWindowMs: seed % 2 ? 60_000 : 0 }, []);
      const random = seededRandom(300 + seed);
      // Payloads of 15.5 to 17 KiB in bytes: in characters, a third to all of that.
      const sizes = Array.from({ length: 100 }, () => BIG_ENTRY_BYTES - 1100 + Math.floor(random() * 1800));
      await publishEveryWay(app.get(EventrailPublisher), sizes, random);
      const keys = new EventrailKeys(prefix, 2);
      for (let p = 0; p < 2; p++) {
        const { missing, extra } = await indexMismatch(redis, keys, p);
        if (missing.length > 0) problems.push(`seed ${seed} p${p}: ${missing.length} big entries not indexed`);
        if (extra.length > 0) problems.push(`seed ${seed} p${p}: ${extra.length} entries indexed that are not big`);
      }
      const indexed = (await redis.zcard(keys.bigEntries(0))) + (await redis.zcard(keys.bigEntries(1)));
      expect(indexed).toBeGreaterThan(0);
      expect(indexed).toBeLessThan(200);
    }
    expect(problems).toEqual([]);
  });

  it('publishers appending big entries while four groups (64 KiB x1, 512 KiB x200, 600 001 B x10 000 with parked keys, 4 MiB batch) read behind: no reply of several entries over its bound, no big entry in a plain one, every entry once, per key in order', async () => {
    const prefix = uniquePrefix('live');
    const app = await start(prefix, { dedupWindowMs: 60_000 });
    const publisher = app.get(EventrailPublisher);
    const random = seededRandom(41);
    const before = generateSizes(random, 1000);
    await publishEveryWay(publisher, before, random);
    for (let n = 0; n < 1900; n += 37) failOnce.add(n);
    const { replies, sizes, asked } = recordReplies();
    await app.get(EventrailConsumers).start();
    // While every group is behind, three publishers append more, big ones among them, in rounds.
    const during = generateSizes(seededRandom(42), 900, 0.08);
    const rounds = 3;
    const per = during.length / rounds;
    let total = before.length;
    for (let r = 0; r < rounds; r++) {
      const slice = during.slice(r * per, (r + 1) * per);
      const third = Math.ceil(slice.length / 3);
      await Promise.all(
        [0, 1, 2].map((w) =>
          publishEveryWay(publisher, slice.slice(w * third, (w + 1) * third), seededRandom(50 + 10 * r + w), total + w * third),
        ),
      );
      total += slice.length;
    }
    await waitFor(
      () => GROUPS.every((g) => got(g).length >= total),
      () => GROUPS.map((g) => `${g} ${got(g).length}`).join(', ') + ` of ${total}`,
      60_000,
    );
    // Per key in order within each publisher's share: the three wrote different numbers of the same keys at once.
    const problems = GROUPS.flatMap((g) =>
      onceInKeyOrder(
        g,
        got(g).filter((n) => n < before.length),
        before.length,
      ),
    );
    for (const g of GROUPS) {
      const all = [...got(g)].sort((a, b) => a - b);
      if (all.length !== total || all.some((n, i) => n !== i)) problems.push(`${g}: not every entry once (${all.length} of ${total})`);
    }
    const broken = violations(replies, sizes);
    const plain = replies.filter((r) => r.kind === 'plain');
    console.log(
      `live: ${total} entries, ${plain.length} plain replies (${plain.reduce((s, r) => s + r.ids.length, 0)} entries), ` +
        `${replies.length - plain.length} script replies, index asked ${asked.length} times; violations ${broken.length}`,
    );
    expect(broken.slice(0, 10)).toEqual([]);
    expect(problems).toEqual([]);
    // The plain reads did the work: the log was indexed from its start.
    expect(plain.length).toBeGreaterThan(0);
  });

  it('a publisher whose scripts Redis refuses (an ACL without EVALSHA) appends big entries while a full user reads: each lone publish lands, the partition is marked, no reply over its bound', async () => {
    const prefix = uniquePrefix('noscript');
    await createAclUser(redis, 'noscript-writer', 'pw', `${eventrailAclRules(prefix).full} -evalsha -eval`);
    const writer = await createApp(
      { redis: `redis://noscript-writer:pw@127.0.0.1:${server.port}`, prefix, partitions: 1, maxPayloadBytes: 4 * MIB, autoStart: false },
      [],
    );
    apps.push(writer);
    const publisher = writer.get(EventrailPublisher);
    const keys = new EventrailKeys(prefix, 1);
    // The full user's app reads what the writer appends; the writer's first append is a lone big publish.
    const reader = await start(prefix);
    const { replies, sizes } = recordReplies();
    const random = seededRandom(7);
    const outcomes: string[] = [];
    let total = 0;
    // Its first appends: three big events published at once (one tick, coalesced), each alone in its call.
    const firsts = [0, 1, 2].map(() => eventOf(random, total++, 2 * BIG_ENTRY_BYTES));
    const settled = await Promise.allSettled(firsts.map((one) => publisher.publish(one.event, one.data, { key: one.key })));
    const refusedFirst = settled.filter((r) => r.status === 'rejected').length;
    for (const r of settled) if (r.status === 'rejected') outcomes.push(`refused: ${String((r.reason as Error).message).slice(0, 140)}`);
    const sizesToo = generateSizes(random, 400, 0.1);
    for (let i = 0; i < sizesToo.length; i++, total++) {
      const one = eventOf(random, total, sizesToo[i]);
      await publisher.publish(one.event, one.data, { key: one.key }).then(
        () => undefined,
        (error: Error) => outcomes.push(`${total} refused: ${error.message.slice(0, 120)}`),
      );
    }
    const mark = await redis.get(keys.indexedFrom(0));
    await reader.get(EventrailConsumers).start();
    const expected = total - outcomes.length;
    await waitFor(
      () => GROUPS.every((g) => got(g).length >= expected),
      () => GROUPS.map((g) => `${g} ${got(g).length}`).join(', ') + ` of ${expected}`,
      60_000,
    );
    console.log(
      `no-script writer: ${refusedFirst} of its 3 first big publishes refused, ${outcomes.length - refusedFirst} later ones; mark ${mark}; ` +
        `${replies.length} replies, violations ${violations(replies, sizes).length}`,
    );
    expect(violations(replies, sizes).slice(0, 10)).toEqual([]);
    expect(mark).toBe('none');
    // Before big entries were indexed, such a writer appended every one with a plain XADD: its first ones must land too,
    // not fail with the refusal of the indexing script (EventrailScripts.append throws it and only then turns to XADD).
    expect({ refused: outcomes }).toEqual({ refused: [] });
  });

  /**
   * Waits until every group in `groups` handled `total` distinct numbers. Not a count of handlings: a group
   * without idempotency may repeat an entry when a lease moves, and its count would reach `total` while
   * entries were still to come.
   */
  const drained = (groups: string[], total: number, timeoutMs = 60_000) =>
    waitFor(
      () => groups.every((g) => new Set(got(g)).size >= total),
      () => groups.map((g) => `${g} ${new Set(got(g)).size}`).join(', ') + ` of ${total}`,
      timeoutMs,
    );

  it('leases moving between two apps mid-stretch, one closed, then every offset moved back to the start (forced): no reply over its bound, every entry once per pass, per key in order', async () => {
    const prefix = uniquePrefix('moves');
    const handlers = [Single, Line, Wide];
    const groups = ['single', 'line', 'wide'];
    const first = await start(prefix, { partitions: 2 }, handlers);
    const random = seededRandom(61);
    const sizes = generateSizes(random, 800, 0.06);
    await publishEveryWay(first.get(EventrailPublisher), sizes, random);
    const { replies, sizes: seenSizes } = recordReplies();
    await first.get(EventrailConsumers).start();
    await waitFor(() => got('line').length >= 200, 'a stretch read by the first app');
    const second = await start(prefix, { partitions: 2 }, handlers);
    await second.get(EventrailConsumers).start();
    await waitFor(() => got('line').length >= 450, 'more read with two apps');
    await first.close();
    apps.splice(apps.indexOf(first), 1);
    await drained(groups, sizes.length);
    // Every commit landed, so no handling of the first pass is still in flight when the lists are judged and cleared.
    await second.get(EventrailConsumers).settled({ timeoutMs: 30_000 });
    const problems = groups.flatMap((g) => onceInKeyOrder(g, got(g), sizes.length));
    // Back to the start, with the second app's workers in the middle of nothing: they take it all again.
    seen.clear();
    const admin = second.get(EventrailAdmin);
    for (const g of groups) await admin.resetOffsets(g, 'start', { force: true });
    await drained(groups, sizes.length);
    problems.push(...groups.flatMap((g) => onceInKeyOrder(`${g} after the reset`, got(g), sizes.length)));
    const broken = violations(replies, seenSizes);
    console.log(
      `moves: ${replies.length} replies (${replies.filter((r) => r.kind === 'plain').length} plain), violations ${broken.length}`,
    );
    expect(broken.slice(0, 10)).toEqual([]);
    // 'single' has no idempotency: a lease moved mid-batch may run an entry again; the others must not.
    expect(problems.filter((p) => !p.startsWith('single: ') || !p.includes('twice'))).toEqual([]);
  });

  it('retention trims (approximate and exact) below the slowest group while three groups read: the index keeps every big entry left, no reply over its bound, every entry once, per key in order', async () => {
    const prefix = uniquePrefix('trims');
    const handlers = [Single, Line, Wide];
    const groups = ['single', 'line', 'wide'];
    const app = await start(prefix, {}, handlers);
    const keys = new EventrailKeys(prefix, 1);
    const random = seededRandom(71);
    const sizes = generateSizes(random, 1000, 0.06);
    await publishEveryWay(app.get(EventrailPublisher), sizes, random);
    const { replies, sizes: seenSizes } = recordReplies();
    const scripts = app.get(EventrailRedis).scripts;
    await app.get(EventrailConsumers).start();
    const problems: string[] = [];
    let trimmed = 0;
    for (let round = 0; round < 8; round++) {
      const least = Math.min(...groups.map((g) => got(g).length));
      await waitFor(
        () => Math.min(...groups.map((g) => got(g).length)) > least || Math.min(...groups.map((g) => got(g).length)) >= sizes.length,
        'the slowest group moved on',
      );
      const offsets = await Promise.all(groups.map((g) => redis.get(keys.offset(g, 0))));
      if (offsets.some((o) => o === null)) continue;
      const slowest = offsets.sort((a, b) => (compareStreamIds(a!, b!) < 0 ? -1 : 1))[0]!;
      trimmed += await scripts.trimLog({ partition: 0, minId: slowest, approximate: round % 2 === 0, sinkId: '', allowUnarchived: true });
      const { missing } = await indexMismatch(redis, keys, 0);
      if (missing.length > 0) problems.push(`round ${round}: ${missing.length} big entries left in the stream but not indexed`);
    }
    await drained(groups, sizes.length);
    problems.push(...groups.flatMap((g) => onceInKeyOrder(g, got(g), sizes.length)));
    const broken = violations(replies, seenSizes);
    console.log(`trims: ${trimmed} entries trimmed in 8 rounds, ${replies.length} replies, violations ${broken.length}`);
    expect(broken.slice(0, 10)).toEqual([]);
    expect(problems).toEqual([]);
  });

  it('big entries dead-lettered and replayed: indexed as they are appended again, read within the bound, handled', async () => {
    const prefix = uniquePrefix('letters');
    const app = await start(prefix, {}, [Letters]);
    const keys = new EventrailKeys(prefix, 1);
    const random = seededRandom(81);
    const sizes = generateSizes(random, 250, 0.15);
    sizes.forEach((bytes, n) => bytes > BIG_ENTRY_BYTES - 900 && n % 3 === 0 && failAlways.add(n));
    await publishEveryWay(app.get(EventrailPublisher), sizes, random);
    const { replies, sizes: seenSizes } = recordReplies();
    await app.get(EventrailConsumers).start();
    const failing = failAlways.size;
    await drained(['letters'], sizes.length - failing);
    const admin = app.get(EventrailAdmin);
    failAlways.clear();
    expect(await admin.replayDeadLetters('letters', 'all')).toBe(failing);
    await drained(['letters'], sizes.length);
    const { missing, extra } = await indexMismatch(redis, keys, 0);
    console.log(`letters: ${failing} dead-lettered and replayed; index missing ${missing.length}, extra ${extra.length}`);
    expect({ missing, extra }).toEqual({ missing: [], extra: [] });
    expect(violations(replies, seenSizes).slice(0, 10)).toEqual([]);
    expect([...got('letters')].sort((a, b) => a - b)).toEqual([...Array(sizes.length).keys()]);
  });

  it('a log written before eventrail indexed (raw XADDs, big ones and entries of many tiny fields, no mark), two apps started on it at once: the script reads up to the mark, plain reads after it, no reply over its bound', async () => {
    const prefix = uniquePrefix('older');
    const keys = new EventrailKeys(prefix, 2);
    const random = seededRandom(91);
    let n = 0;
    // Partition 1 has no stream at all when the apps start.
    for (let i = 0; i < 200; i++, n++) {
      const r = random();
      const fields: string[] = ['event', 'small', 'key', `ключ-${n % KEYS}`];
      // Many tiny fields weigh their framing: 1 800 one-byte fields are over the line, 1 500 are not.
      if (r < 0.1) for (let f = 0; f < 1500 + Math.floor(random() * 600); f++) fields.push(`f${f}`, 'x');
      const bytes = r > 0.9 ? BIG_ENTRY_BYTES + Math.floor(random() * 400_000) : Math.floor(random() * 2000);
      fields.push('data', JSON.stringify({ n, blob: utf8(random, bytes) }));
      await redis.xadd(keys.stream(0), '*', ...fields);
    }
    const lastRaw = (await redis.xrevrange(keys.stream(0), '+', '-', 'COUNT', 1))[0][0];
    const [one, two] = await Promise.all([start(prefix, { partitions: 2 }), start(prefix, { partitions: 2 })]);
    expect(await redis.get(keys.indexedFrom(0))).toBe(lastRaw);
    expect(await redis.get(keys.indexedFrom(1))).toBe('0-0');
    const more = generateSizes(random, 400, 0.08);
    await publishEveryWay(one.get(EventrailPublisher), more, random, n);
    const total = n + more.length;
    const { replies, sizes } = recordReplies();
    await Promise.all([one.get(EventrailConsumers).start(), two.get(EventrailConsumers).start()]);
    await drained(['line', 'odd', 'wide'], total);
    const raw = new Set((await redis.xrange(keys.stream(0), '-', lastRaw)).map(([id]) => `${keys.stream(0)} ${id}`));
    const plainRaw = replies.filter((r) => r.kind === 'plain' && r.ids.length > 1 && r.ids.some((id) => raw.has(id)));
    const broken = violations(replies, sizes);
    console.log(
      `older log: ${replies.length} replies, ${plainRaw.length} plain replies of several over raw entries, violations ${broken.length}`,
    );
    expect(broken.slice(0, 10)).toEqual([]);
    expect(plainRaw).toEqual([]);
    // Handled at least once; the groups without idempotency may repeat an entry when the second app took a lease mid-batch.
    for (const g of ['line', 'odd', 'wide']) expect(new Set(got(g)).size).toBe(total);
  });

  it('Redis SIGKILLed mid-drain and restarted from its AOF (everysec) while publishers append big entries, and SCRIPT FLUSH after: the index holds every big entry left, no reply over its bound', async () => {
    const args = ['--dir', mkdtempSync(join(tmpdir(), 'eventrail-indexed-')), '--appendonly', 'yes', '--appendfsync', 'everysec'];
    let own = await startRedisServer(undefined, args);
    const port = own.port;
    const prefix = uniquePrefix('aof');
    const keys = new EventrailKeys(prefix, 1);
    const app = await createApp({ redis: own.url, prefix, partitions: 1, maxPayloadBytes: 4 * MIB, autoStart: false }, [Line, Odd, Wide]);
    apps.push(app);
    const publisher = app.get(EventrailPublisher);
    const random = seededRandom(101);
    const sizes = generateSizes(random, 700, 0.06);
    await publishEveryWay(publisher, sizes, random);
    const { replies, sizes: seenSizes } = recordReplies();
    await app.get(EventrailConsumers).start();
    await waitFor(() => got('line').length >= 200, 'a stretch read before the kill');
    // Publishers go on through the kill; what Redis had not written to its AOF is lost, or refused while it is down.
    let publishing = true;
    let appended = 0;
    const writer = (async () => {
      const w = seededRandom(102);
      for (let i = 0; publishing; i++) {
        const one = eventOf(w, 100_000 + i, w() < 0.2 ? BIG_ENTRY_BYTES + Math.floor(w() * 100_000) : Math.floor(w() * 3000));
        // Refused at once while Redis is down: wait a turn of the event loop before the next, or this loop would
        // run on microtasks alone and starve the timers the test waits with (and the client's reconnect).
        await publisher.publish(one.event, one.data, { key: `w${i % 3}` }).then(
          () => appended++,
          () => new Promise((resolve) => setImmediate(resolve)),
        );
      }
    })();
    await waitFor(() => appended >= 50, '50 appended before the kill');
    process.kill(own.pid, 'SIGKILL');
    await waitFor(() => {
      try {
        process.kill(own.pid, 0);
        return false;
      } catch {
        return true;
      }
    }, 'the killed redis-server gone');
    own = await startRedisServer(port, args);
    const root = new Redis(own.url);
    try {
      const at = appended;
      await waitFor(() => appended >= at + 50, '50 appended after the restart', 30_000);
      await root.script('FLUSH');
      await waitFor(() => appended >= at + 100, '50 more appended after SCRIPT FLUSH', 30_000);
      publishing = false;
      await writer;
      const left = (await root.xrange(keys.stream(0), '-', '+')).map(([, f]) => JSON.parse(f[f.indexOf('data') + 1]).n as number);
      await waitFor(
        () => ['line', 'odd', 'wide'].every((g) => left.every((m) => got(g).includes(m))),
        () =>
          `every entry left handled: ${['line', 'odd', 'wide'].map((g) => `${g} ${left.filter((m) => got(g).includes(m)).length}`)} of ${left.length}`,
        60_000,
      );
      const { missing, extra } = await indexMismatch(root, keys, 0);
      const broken = violations(replies, seenSizes);
      console.log(
        `aof: ${left.length} entries after the restart, ${appended} appended by the writer; index missing ${missing.length}, extra ${extra.length}; ` +
          `${replies.length} replies, violations ${broken.length}; mark ${await root.get(keys.indexedFrom(0))}`,
      );
      expect({ missing, extra }).toEqual({ missing: [], extra: [] });
      expect(broken.slice(0, 10)).toEqual([]);
    } finally {
      publishing = false;
      await app.close();
      apps.splice(apps.indexOf(app), 1);
      root.disconnect();
      await own.stop();
    }
  });
});
