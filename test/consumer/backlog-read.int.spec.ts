import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EntryOrigin, isMalformed, readEntry } from '../../lib/wire/codec';
import { readEntryBuffers } from '../../lib/wire/entry-reader';
import { logTag } from '../../lib/wire/event-id';
import { EventrailKeys } from '../../lib/redis/keys';
import { XReadBufferReply } from '../../lib/redis/stream-read';
import { EventrailClient, registerScripts } from '../../lib/redis/scripts';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';

type Field = string | Buffer;

/** Entries of every shape a producer can XADD: keyed, binary, UTF-8, unknown fields, long values, many fields, malformed. */
function entryShapes(): Field[][] {
  const random = seededRandom(7);
  const bytes = (n: number): Buffer => Buffer.from(Array.from({ length: n }, () => Math.floor(random() * 256)));
  const many: Field[] = ['event', 'wide', 'data', '{}'];
  for (let i = 0; i < 20; i++) many.push(`extra${i}`, 'é'.repeat(i * 10));
  return [
    ['event', 'order.placed', 'key', 'o1', 'data', '{"n":1}'],
    ['id', 'evt-1', 'event', 'order.placed', 'time', '1700000000000', 'data', '{"n":2}', 'headers', '{"traceparent":"t"}'],
    ['data', '{"n":3}', 'event', 'ünïcödé ✓', 'key', '🙂'],
    ['event', 'bin', 'key', bytes(40), 'data', bytes(100), bytes(3), bytes(9)],
    ['event', 'long', 'data', `"${'x'.repeat(70_000)}"`],
    many,
    ['data', '{}', 'key', 'k'],
    ['event', 'no-data', 'dat', '{}', 'datA', '{}'],
    ['event', 'late', 'data', '1', 'time', 'soon'],
    ['Event', 'x', 'DATA', '1', 'to', 'ledger'],
    ['event', 'replayed', 'data', '1', 'to', 'ledger'],
  ];
}

describe('readBacklog-1.lua', () => {
  const prefix = uniquePrefix('backlog');
  const keys = new EventrailKeys(prefix, 1);
  const stream = keys.stream(0);
  const origin: EntryOrigin = { partition: 0, logTag: logTag(prefix) };
  let redis: Redis;
  let client: EventrailClient;
  let ids: string[];

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    client = registerScripts(redis);
    ids = [];
    for (const fields of entryShapes()) ids.push((await redis.xadd(stream, '*', ...fields)) as string);
  });
  afterAll(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  /** What the consumer read before: XREAD's strings through readEntry. */
  const asStrings = async (after: string, count: number): Promise<ReturnType<typeof readEntry>[]> => {
    const reply = await redis.xread('COUNT', count, 'STREAMS', stream, after);
    return (reply?.[0][1] ?? []).map(([id, fields]) => readEntry(id, fields, origin));
  };
  /** No byte bound to speak of: the count alone decides. */
  const UNBOUNDED = 512 * 1024 * 1024;
  const packed = async (after: string, count: number): Promise<ReturnType<typeof readEntry>[]> =>
    (await client.eventrailReadBacklogBuffer(stream, after, count, UNBOUNDED))[0].map(([id, fields]) =>
      readEntryBuffers(id, fields, origin),
    );

  it('reads what XREAD reads, entry for entry, from any id and at any count', async () => {
    const all = await asStrings('0-0', 100);
    expect(all).toHaveLength(ids.length);
    expect(all.filter(isMalformed).map((e) => e.reason)).toEqual([
      'missing field "event"',
      'missing field "data"',
      'field "time" is not a number of milliseconds',
      'missing field "event"',
    ]);
    expect(await packed('0-0', 100)).toEqual(all);
    for (const [i, after] of ['0-0', ...ids].entries()) {
      for (const count of [1, 3, 100]) expect(await packed(after, count)).toEqual(all.slice(i, i + count));
    }
  });

  it('reads what xreadBuffer through readEntryBuffers reads', async () => {
    const reply = (await redis.xreadBuffer('COUNT', 100, 'STREAMS', stream, '0-0')) as XReadBufferReply;
    const fromBuffers = (reply?.[0][1] ?? []).map(([id, fields]) => readEntryBuffers(id, fields, origin));
    expect(fromBuffers).toEqual(await asStrings('0-0', 100));
  });

  it('answers an empty batch after the last entry and for a stream that does not exist', async () => {
    expect(await packed(ids[ids.length - 1], 10)).toEqual([]);
    const [none, largest, left] = await client.eventrailReadBacklogBuffer(keys.stream(0) + ':none', '0-0', 10, UNBOUNDED);
    expect([none, largest, left]).toEqual([[], 0, 0]);
  });

  it('stops before the entry that would take it past the byte bound, whatever the sizes before it, and says that entry’s size', async () => {
    const sized = keys.stream(0) + ':sized';
    // Each entry is its id plus 'event', 'e', 'data' and a value of `n` bytes, and their framing.
    const plan = [...Array<number>(30).fill(10), 5000, 5000, 20_000, 10, 10];
    const added: Array<{ id: string; bytes: number }> = [];
    for (const n of plan) {
      const id = (await redis.xadd(sized, '*', 'event', 'e', 'data', 'x'.repeat(n))) as string;
      // Eight bytes of framing for the id and each of the four fields, as the script counts them.
      added.push({ id, bytes: id.length + 'event'.length + 1 + 'data'.length + n + 8 * 5 });
    }
    const read = async (after: string, count: number, bound: number): Promise<{ ids: string[]; largest: number; left: number }> => {
      const [bytes, largest, left] = await client.eventrailReadBacklogBuffer(sized, after, count, bound);
      return { ids: bytes.map(([id]) => id.toString()), largest, left };
    };
    const sum = (from: number, to: number): number => added.slice(from, to).reduce((total, e) => total + e.bytes, 0);
    const ids = (from: number, to: number): string[] => added.slice(from, to).map((e) => e.id);
    // Entries of one payload size differ by their ids' lengths (a sequence going from 9 to 10, say).
    const most = (from: number, to: number): number => Math.max(...added.slice(from, to).map((e) => e.bytes));

    // The 30 small entries and the first of 5000 fit in 8 KiB; the second of 5000 does not, and is named by its size.
    const bound = 8 * 1024;
    expect(sum(0, 31)).toBeLessThanOrEqual(bound);
    expect(await read('0-0', 100, bound)).toEqual({ ids: ids(0, 31), largest: most(0, 31), left: added[31].bytes });
    // The entry over the bound alone comes alone, as the first of a read.
    expect(await read(added[31].id, 100, bound)).toEqual({ ids: ids(32, 33), largest: added[32].bytes, left: added[33].bytes });
    // An entry that fits exactly is taken; the count stops a read with nothing left out.
    expect(await read(added[32].id, 100, sum(33, 35))).toEqual({ ids: ids(33, 35), largest: most(33, 35), left: 0 });
    expect(await read('0-0', 3, bound)).toEqual({ ids: ids(0, 3), largest: most(0, 3), left: 0 });
  });
});

const seen: EventrailMessage<{ n: number }>[] = [];

@Injectable()
class Jobs {
  @OnEvent('job', 'jobs')
  handle(message: EventrailMessage<{ n: number }>): void {
    seen.push(message);
  }
}

describe('a worker behind the log', () => {
  // A Redis of its own: whether the backlog script was ever loaded tells whether the worker read packed.
  let server: RedisServer;
  let redis: Redis;
  let app: INestApplicationContext;
  const prefix = 'behind';
  const keys = new EventrailKeys(prefix, 1);
  const sha = createHash('sha1')
    .update(readFileSync(join(__dirname, '../../lib/redis/scripts/readBacklog-1.lua'), 'utf8'))
    .digest('hex');

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    await app?.close();
    redis.disconnect();
    await server.stop();
  });

  it('drains a backlog with packed reads, dead-letters malformed entries as XREAD would, then blocks again', async () => {
    // 45 entries, 10 a read: the first read is an XREAD, the next ones packed; malformed entries in both.
    const malformed = new Map<number, Field[]>([
      [2, ['data', '{"n":2}']],
      [17, ['event', 'job', 'dat', '{"n":17}']],
      [28, ['event', 'job', 'data', '{"n":28}', 'time', 'soon']],
      [33, ['event', 'job', 'data', '{n:33']],
      [41, ['data', Buffer.from([0xff, 0xfe]), 'key', 'k']],
    ]);
    const offsets: string[] = [];
    for (let n = 0; n < 45; n++) {
      const fields = malformed.get(n) ?? ['event', 'job', 'key', `k${n % 4}`, 'data', JSON.stringify({ n })];
      offsets.push((await redis.xadd(keys.stream(0), '*', ...fields)) as string);
    }
    expect(await redis.script('EXISTS', sha)).toEqual([0]);

    app = await createApp({ redis: server.url, prefix, consumer: { batchSize: 10 } }, [Jobs]);
    const last = offsets[offsets.length - 1];
    await waitFor(async () => (await redis.get(keys.offset('jobs', 0))) === last, 'the backlog committed');

    const valid = offsets.map((_, n) => n).filter((n) => !malformed.has(n));
    expect(seen.map((m) => m.data.n)).toEqual(valid);
    expect(seen.map((m) => m.offset)).toEqual(valid.map((n) => offsets[n]));
    expect(seen.map((m) => m.key)).toEqual(valid.map((n) => `k${n % 4}`));
    expect(await redis.script('EXISTS', sha)).toEqual([1]);

    // The reasons readEntry gives the same entries read as strings; JSON that does not parse fails later, in decodePayload.
    const reasons = await Promise.all(
      [...malformed.keys()].map(async (n) => {
        const [[id, fields]] = await redis.xrange(keys.stream(0), offsets[n], offsets[n]);
        const entry = readEntry(id, fields, { partition: 0, logTag: logTag(prefix) });
        return { offset: id, message: isMalformed(entry) ? entry.reason : 'field "data" is not valid JSON' };
      }),
    );
    const letters = await app.get(EventrailAdmin).deadLetters('jobs');
    expect(letters.map((l) => ({ reason: l.reason, name: l.error.name, offset: l.offset, message: l.error.message }))).toEqual(
      reasons.map((r) => ({ reason: 'malformed', name: 'DecodeError', ...r })),
    );
    expect(letters.find((l) => l.offset === offsets[17])?.data).toEqual(['event', 'job', 'dat', '{"n":17}']);

    // Caught up: parked in a blocking read, and woken by the next event.
    await waitFor(async () => /blocked_clients:1\b/.test(await redis.info('clients')), 'the worker parked in XREAD BLOCK');
    const next = await app.get(EventrailPublisher).publish('job', { n: 45 });
    await waitFor(() => seen.some((m) => m.id === next.id), 'the event published after catching up');
  });

  it('with packedBacklogReads: false, drains the same backlog with XREAD alone', async () => {
    await app.close();
    await redis.flushall();
    await redis.script('FLUSH');
    seen.length = 0;
    const offsets: string[] = [];
    for (let n = 0; n < 35; n++)
      offsets.push((await redis.xadd(keys.stream(0), '*', 'event', 'job', 'data', JSON.stringify({ n }))) as string);
    app = await createApp({ redis: server.url, prefix, consumer: { batchSize: 10, packedBacklogReads: false } }, [Jobs]);
    await waitFor(async () => (await redis.get(keys.offset('jobs', 0))) === offsets[34], 'the backlog committed');
    expect(seen.map((m) => m.data.n)).toEqual(Array.from({ length: 35 }, (_, n) => n));
    expect(await redis.script('EXISTS', sha)).toEqual([0]);
  });
});
