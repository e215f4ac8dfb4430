import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailPublisher, PublishInput, PublishManyError, RedisUnavailableError } from '../../lib';
import { derivedEventId } from '../../lib/wire/event-id';
import { EventrailKeys } from '../../lib/redis/keys';
import { registerScripts } from '../../lib/redis/scripts';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';
import { seededRandom } from '../support/seeded-random';

/**
 * `publishMany` sends consecutive events with producer dedup as one
 * appendManyDedup call per run. Whatever the mix, the outcome must be what
 * one `publish` per event, in call order, gives: an id seen before in its
 * partition (earlier in the batch, or in an earlier call) appends nothing and
 * answers with the first append's offset.
 */
describe('publishMany with producer dedup', () => {
  const PARTITIONS = 3;
  const prefix = uniquePrefix('dedup-runs');
  const keys = new EventrailKeys(prefix, PARTITIONS);
  let app: INestApplicationContext;
  let publisher: EventrailPublisher;
  let redis: Redis;

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    app = await createApp({ prefix, partitions: PARTITIONS, dedupWindowMs: 600_000 });
    publisher = app.get(EventrailPublisher);
    // The first publishMany asks (in the background) whether scripts may run; runs go as scripts after it.
    await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n } })));
    await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n } })));
  });

  afterAll(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('gives, for 40 generated batches of new, repeated and id-less events, what one publish per event in order gives', async () => {
    // What has been appended per partition and id: the offset of its first append.
    const first = new Map<string, string>();
    const expectedEntries = new Map<number, string[]>(); // partition -> the ids or plain markers appended, in order
    for (let seed = 1; seed <= 40; seed++) {
      const random = seededRandom(seed);
      const size = 1 + Math.floor(random() * (seed % 5 === 0 ? 1500 : 60));
      const inputs: PublishInput[] = [];
      for (let n = 0; n < size; n++) {
        const partition = Math.floor(random() * PARTITIONS);
        const roll = random();
        // A small pool of ids, so repeats happen inside a batch, across batches, and across partitions.
        const id = roll < 0.7 ? `id-${Math.floor(random() * 200)}` : undefined;
        inputs.push({ event: 'mix', data: { seed, n }, partition, ...(id !== undefined && { id }) });
      }
      const results = await publisher.publishMany(inputs);
      expect(results).toHaveLength(size);
      for (const [n, result] of results.entries()) {
        const input = inputs[n];
        expect(result.partition).toBe(input.partition);
        const list = expectedEntries.get(result.partition) ?? [];
        expectedEntries.set(result.partition, list);
        if (input.id === undefined) {
          expect(result.duplicate).toBeUndefined();
          expect(result.id).toBe(derivedEventId(keys.logTag, result.partition, result.offset));
          list.push(`plain ${seed} ${n}`);
          continue;
        }
        expect(result.id).toBe(input.id);
        const seen = first.get(`${result.partition} ${input.id}`);
        if (seen === undefined) {
          expect(result.duplicate).toBe(false);
          first.set(`${result.partition} ${input.id}`, result.offset);
          list.push(`id ${input.id}`);
        } else {
          expect(result.duplicate).toBe(true);
          expect(result.offset).toBe(seen);
        }
      }
    }
    // The log holds each id once per partition, everything in call order.
    for (let partition = 0; partition < PARTITIONS; partition++) {
      const entries = (await redis.xrange(keys.stream(partition), '-', '+')).filter(([, f]) => f[f.indexOf('event') + 1] === 'mix');
      const written = entries.map(([offset, f]) => {
        const at = f.indexOf('id');
        if (at >= 0 && at % 2 === 0) {
          expect(first.get(`${partition} ${f[at + 1]}`)).toBe(offset);
          return `id ${f[at + 1]}`;
        }
        const { seed, n } = JSON.parse(f[f.indexOf('data') + 1]) as { seed: number; n: number };
        return `plain ${seed} ${n}`;
      });
      expect(written).toEqual(expectedEntries.get(partition) ?? []);
    }
  });

  it('reports the events after a failed command as not appended, and keeps what went before', async () => {
    const other = uniquePrefix('dedup-runs-fail');
    const otherKeys = new EventrailKeys(other, 2);
    const otherApp = await createApp({ prefix: other, partitions: 2, dedupWindowMs: 600_000 });
    try {
      const otherPublisher = otherApp.get(EventrailPublisher);
      await otherPublisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n }, partition: 0 })));
      await otherPublisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n }, partition: 0 })));
      // The mark of event 5 holds a hash: its GET fails, and the run stops there.
      await redis.hset(otherKeys.dedup(0, 'bad-5'), 'x', '1');
      const inputs = Array.from({ length: 10 }, (_, n) => ({
        event: 'split',
        data: { n },
        partition: 0,
        id: n === 5 ? 'bad-5' : `ok-${n}`,
      }));
      const error = await otherPublisher.publishMany(inputs).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PublishManyError);
      expect(error).toBeInstanceOf(RedisUnavailableError);
      expect(String((error as Error).message)).toContain('5 appended, 5 not appended');
      expect((error as PublishManyError).outcomes).toEqual([...Array(5).fill('appended'), ...Array(5).fill('not-appended')]);
      expect(String((error as RedisUnavailableError).cause)).toContain('WRONGTYPE');
      const appended = (await redis.xrange(otherKeys.stream(0), '-', '+')).filter(([, f]) => f[f.indexOf('event') + 1] === 'split');
      expect(appended.map(([, f]) => JSON.parse(f[f.indexOf('data') + 1]).n)).toEqual([0, 1, 2, 3, 4]);
      // Sent again once the mark is gone: the five appended are duplicates, the rest are appended now.
      await redis.del(otherKeys.dedup(0, 'bad-5'));
      const again = await otherPublisher.publishMany(inputs);
      expect(again.map((r) => r.duplicate)).toEqual([true, true, true, true, true, false, false, false, false, false]);
      const after = (await redis.xrange(otherKeys.stream(0), '-', '+')).filter(([, f]) => f[f.indexOf('event') + 1] === 'split');
      expect(after.map(([, f]) => JSON.parse(f[f.indexOf('data') + 1]).n)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    } finally {
      await otherApp.close();
      await deletePrefix(redis, other);
    }
  });

  it('the script refuses malformed calls and writes nothing', async () => {
    const client = registerScripts(redis.duplicate());
    try {
      const stream = keys.stream(2);
      const ix = [keys.bigEntries(2), keys.indexedFrom(2)];
      const before = await redis.xlen(stream);
      const cases: Array<[Array<string | number>, string]> = [
        [[4, stream, ...ix, 'm1', -1, '', '', '', '', 2, 'event', 'x'], 'dedup window'],
        [[4, stream, ...ix, 'm1', 1000, '', '', '', '', 3, 'event', 'x', 'y'], 'malformed arguments at position 6'],
        [
          [5, stream, ...ix, 'm1', 'm2', 1000, '', '', '', '', 2, 'event', 'x'],
          '1 events, 1 dedup keys and 0 guard key expected after the stream and its index keys, got 5 keys',
        ],
        [[3, stream, ...ix, 0, '', '', '', '', 2, 'event', 'x', 2, 'event', 'y', 4], 'malformed arguments at position 12'],
        // A guard needs its key, a count of runs before, whether more follow, and a TTL.
        [[4, stream, ...ix, 'g1', 0, 'one', '1', 1000, '', 2, 'event', 'x'], 'malformed guard arguments'],
        [[4, stream, ...ix, 'g1', 0, 1, '2', 1000, '', 2, 'event', 'x'], 'malformed guard arguments'],
        [[4, stream, ...ix, 'g1', 0, 1, '1', 0, '', 2, 'event', 'x'], 'malformed guard arguments'],
        [
          [3, stream, ...ix, 0, 1, '1', 1000, '', 2, 'event', 'x'],
          '1 events, 0 dedup keys and 1 guard key expected after the stream and its index keys, got 3 keys',
        ],
        // More field arguments than one XADD can take from Lua (unpack's limit is about 8000).
        [
          [4, stream, ...ix, 'm1', 1000, '', '', '', '', 7002, ...Array.from({ length: 3501 }, (_, i) => [`f${i}`, 'v']).flat()],
          'malformed arguments at position 6',
        ],
      ];
      for (const [args, message] of cases) {
        const [numberOfKeys, ...rest] = args as [number, ...Array<string | number>];
        await expect(client.eventrailAppendManyDedup(numberOfKeys, ...rest)).rejects.toThrow(message);
      }
      // appendMany checks a counted run's shape with the same code (append-run.lua).
      for (const [args, message] of [
        [[0, '', 3, 'event', 'x', 'y'], 'appendMany: malformed arguments at position 3'],
        [[0, '', 2, 'event', 'x', 4, 'a', 'b'], 'appendMany: malformed arguments at position 6'],
        [[0, '', 2, 'event', 'x', 'two', 'a', 'b'], 'appendMany: malformed arguments at position 6'],
      ] as Array<[Array<string | number>, string]>) {
        await expect(client.eventrailAppendMany(3, stream, ...ix, ...args)).rejects.toThrow(message);
      }
      expect(await redis.xlen(stream)).toBe(before);
      expect(await redis.exists('m1', 'm2', 'g1')).toBe(0);
      // The largest accepted count appends, and the same id again in the same run is a duplicate.
      const most = Array.from({ length: 3500 }, (_, i) => [`f${i}`, 'v']).flat();
      const [offsets, duplicates] = await client.eventrailAppendManyDedup(
        5,
        stream,
        ...ix,
        'm1',
        'm1',
        1000,
        '',
        '',
        '',
        '',
        7000,
        ...most,
        7000,
        ...most,
      );
      expect(offsets).toEqual([offsets[0], offsets[0]]);
      expect(duplicates).toEqual([0, 1]);
      expect(await redis.xlen(stream)).toBe(before + 1);
      expect(await redis.pttl('m1')).toBeGreaterThan(0);
      await redis.del('m1');
    } finally {
      client.disconnect();
    }
  });

  it('appends a guarded run only when every earlier run of its call in the partition was done', async () => {
    const client = registerScripts(redis.duplicate());
    try {
      const stream = keys.stream(2);
      const guard = keys.runGuard(2, 'test');
      const run = (runsBefore: number, more: boolean, ...values: string[]): Promise<[string[], number[], string?]> =>
        client.eventrailAppendManyDedup(
          4,
          stream,
          keys.bigEntries(2),
          keys.indexedFrom(2),
          guard,
          0,
          runsBefore,
          more ? '1' : '0',
          60_000,
          '',
          ...values.flatMap((v) => [2, 'n', v]),
        );
      const entries = async (): Promise<string[]> => (await redis.xrange(stream, '-', '+')).map(([, f]) => f[1]);
      await redis.del(stream);
      // Three runs of one call: each sets the guard for the next; the last deletes it.
      expect((await run(0, true, 'a1', 'a2'))[0]).toHaveLength(2);
      expect(await redis.get(guard)).toBe('1');
      expect(await redis.pttl(guard)).toBeGreaterThan(50_000);
      expect((await run(1, true, 'a3'))[0]).toHaveLength(1);
      expect((await run(2, false, 'a4'))[0]).toHaveLength(1);
      expect(await redis.exists(guard)).toBe(0);
      expect(await entries()).toEqual(['a1', 'a2', 'a3', 'a4']);
      // A later run whose earlier run never set the guard (refused, failed, or lost) appends nothing.
      expect(await run(1, false, 'b2')).toEqual([[], [], expect.stringMatching(/^GUARDED /)]);
      // One whose guard says fewer runs were done than it follows, neither.
      await redis.set(guard, '1');
      expect(await run(2, false, 'c3')).toEqual([[], [], expect.stringMatching(/^GUARDED /)]);
      // A run that fails part way deletes the guard: the runs after it append nothing.
      await redis.set(guard, '1');
      await redis.set(`${prefix}:not-a-stream`, 'x');
      const failing = await client.eventrailAppendManyDedup(
        4,
        `${prefix}:not-a-stream`,
        keys.bigEntries(2),
        keys.indexedFrom(2),
        guard,
        0,
        1,
        '1',
        60_000,
        '',
        2,
        'n',
        'd2',
      );
      expect(failing[2]).toMatch(/^WRONGTYPE/);
      expect(await redis.exists(guard)).toBe(0);
      expect(await run(2, false, 'd3')).toEqual([[], [], expect.stringMatching(/^GUARDED /)]);
      expect(await entries()).toEqual(['a1', 'a2', 'a3', 'a4']);
      await redis.del(`${prefix}:not-a-stream`);
    } finally {
      client.disconnect();
    }
  });
});
