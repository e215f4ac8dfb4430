import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import {
  EventrailPublisher,
  InvalidEventDataError,
  InvalidEventNameError,
  InvalidHeadersError,
  InvalidPublishOptionsError,
  partitionForKey,
  PayloadTooLargeError,
  PublishManyError,
  RedisUnavailableError,
} from '../../lib';
import { derivedEventId } from '../../lib/wire/event-id';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

describe('EventrailPublisher', () => {
  const prefix = uniquePrefix('pub');
  const keys = new EventrailKeys(prefix, 4);
  let app: INestApplicationContext;
  let publisher: EventrailPublisher;
  let redis: Redis;

  const logLength = async (): Promise<number> => {
    let total = 0;
    for (const stream of keys.streams) total += await redis.xlen(stream);
    return total;
  };

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    app = await createApp({ prefix, partitions: 4, maxPayloadBytes: 1000 });
    publisher = app.get(EventrailPublisher);
  });

  afterAll(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('refuses, typed and with nothing appended, data or headers whose getters throw at any read, validation or serialisation', async () => {
    /** A value whose `field` getter answers `reads` times and throws after. */
    const flaky = (reads: number): Record<string, unknown> => {
      let left = reads;
      return Object.defineProperty({}, 'field', {
        enumerable: true,
        get: () => {
          if (left-- <= 0) throw new Error('gone');
          return 'v';
        },
      }) as Record<string, unknown>;
    };
    // Validation reads the property some number of times and serialisation once more: whichever read
    // throws, the outcome is a typed refusal with nothing appended, or an entry with the data as read.
    for (const reads of [0, 1, 2, 3, 4, 5, 6, 7, 8]) {
      for (const publish of [
        () => publisher.publish('flaky.data', flaky(reads)),
        () => publisher.publish('flaky.headers', {}, { headers: flaky(reads) as Record<string, string> }),
      ]) {
        const before = await logLength();
        const outcome = await publish().then(
          () => 'appended',
          (error: unknown) => error,
        );
        if (outcome === 'appended') expect(await logLength()).toBe(before + 1);
        else {
          expect([InvalidEventDataError, InvalidHeadersError].some((type) => outcome instanceof type)).toBe(true);
          expect(await logLength()).toBe(before);
        }
      }
    }
  });

  it('publishMany serialises data as its runs leave: data whose getter answers differently when read again is refused typed, and the outcomes are exactly what the log holds', async () => {
    /** Answers `reads` times, then throws (`throws`) or answers a value over maxPayloadBytes (1000 here). */
    const changing = (reads: number, throws: boolean): Record<string, unknown> => {
      let left = reads;
      return Object.defineProperty({}, 'field', {
        enumerable: true,
        get: () => {
          if (left-- > 0) return 'v';
          if (throws) throw new Error('gone');
          return 'x'.repeat(5_000);
        },
      }) as Record<string, unknown>;
    };
    const counts = { appended: 0, refusedUpFront: 0, refusedMidway: 0 };
    // 300 events of one partition: three runs, the changing one first, in the middle of a run, or last.
    for (const reads of [0, 1, 2, 3, 4]) {
      for (const throws of [true, false]) {
        for (const at of [0, 1, 130, 299]) {
          const batch = Array.from({ length: 300 }, (_, n) => ({
            event: 'many.changing',
            data: n === at ? changing(reads, throws) : { n },
            partition: 2,
          }));
          const before = await logLength();
          const outcome = await publisher.publishMany(batch).then(
            () => 'appended' as const,
            (error: unknown) => error,
          );
          if (outcome === 'appended') {
            counts.appended++;
            expect(await logLength()).toBe(before + 300);
          } else if (outcome instanceof PublishManyError) {
            counts.refusedMidway++;
            expect([InvalidEventDataError, PayloadTooLargeError].some((type) => outcome.cause instanceof type)).toBe(true);
            // Every outcome known: a prefix appended (the runs sent before the refused event's), the refused
            // event and all after it not, and the log holds exactly the prefix.
            const appended = outcome.outcomes.indexOf('not-appended');
            expect(appended).toBeGreaterThanOrEqual(0);
            expect(appended).toBeLessThanOrEqual(at);
            expect(outcome.outcomes).toEqual([...Array(appended).fill('appended'), ...Array(300 - appended).fill('not-appended')]);
            expect(await logLength()).toBe(before + appended);
            const last = outcome.results[appended - 1];
            if (last) expect((await redis.xrevrange(keys.stream(2), '+', '-', 'COUNT', 1))[0][0]).toBe(last.offset);
          } else {
            counts.refusedUpFront++;
            expect([InvalidEventDataError, PayloadTooLargeError].some((type) => outcome instanceof type)).toBe(true);
            expect(await logLength()).toBe(before);
          }
        }
      }
    }
    // Each way was taken: a getter that fails its first read is refused before anything is sent.
    expect(counts.refusedUpFront).toBeGreaterThan(0);
    expect(counts.refusedMidway).toBeGreaterThan(0);
    expect(counts.appended).toBeGreaterThan(0);
  });

  it('publishMany refuses an event over maxPayloadBytes before anything is sent, wherever it is in the batch and whatever its bound', async () => {
    // 200 'a': bound over 1000 (serialised up front, 202 bytes: fits); 999 escapes: refused up front;
    // 400 'é' (800 bytes, 802 with quotes: fits); 600 'é' (1202 bytes: refused).
    for (const [data, fits] of [
      ['a'.repeat(200), true],
      ['\u0001'.repeat(999), false],
      ['é'.repeat(400), true],
      ['é'.repeat(600), false],
    ] as Array<[string, boolean]>) {
      for (const at of [0, 150, 299]) {
        const batch = Array.from({ length: 300 }, (_, n) => ({ event: 'many.sized', data: n === at ? data : { n }, partition: 1 }));
        const before = await logLength();
        if (fits) {
          expect(await publisher.publishMany(batch)).toHaveLength(300);
          expect(await logLength()).toBe(before + 300);
        } else {
          await expect(publisher.publishMany(batch)).rejects.toThrow(PayloadTooLargeError);
          expect(await logLength()).toBe(before);
        }
      }
    }
  });

  it('appends one entry in the documented wire format and returns its position', async () => {
    const result = await publisher.publish(
      'order.created',
      { total: 12.5, items: ['a'] },
      { key: 'order-7', headers: { traceparent: 'tp' } },
    );
    expect(result.partition).toBe(partitionForKey('order-7', 4));
    expect(result.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7/);
    const [[offset, fields]] = await redis.xrange(keys.stream(result.partition), result.offset, result.offset);
    expect(offset).toBe(result.offset);
    // A lean entry: what the stream id already says (the event id, the publish time) is not written.
    expect(fields).toEqual([
      'event',
      'order.created',
      'key',
      'order-7',
      'data',
      '{"total":12.5,"items":["a"]}',
      'headers',
      '{"traceparent":"tp"}',
    ]);
    expect(result.id).toBe(derivedEventId(keys.logTag, result.partition, result.offset));
  });

  it('writes the id and the publish time of an event published with an id of its own', async () => {
    const before = Date.now();
    const result = await publisher.publish('order.created', { total: 1 }, { id: 'outbox-7' });
    const [[, fields]] = await redis.xrange(keys.stream(result.partition), result.offset, result.offset);
    expect(fields.slice(0, 4)).toEqual(['id', 'outbox-7', 'event', 'order.created']);
    expect(Number(fields[fields.indexOf('time') + 1])).toBeGreaterThanOrEqual(before);
    const [many] = await publisher.publishMany([{ event: 'order.created', data: {}, id: 'outbox-8' }]);
    const [[, manyFields]] = await redis.xrange(keys.stream(many.partition), many.offset, many.offset);
    expect(manyFields).toEqual(expect.arrayContaining(['id', 'outbox-8', 'time']));
  });

  it('sends keyless events to partition 0 unless told otherwise, and keeps a given id', async () => {
    expect((await publisher.publish('tick', {})).partition).toBe(0);
    const chosen = await publisher.publish('tick', {}, { partition: 3, id: 'outbox-42' });
    expect(chosen).toMatchObject({ partition: 3, id: 'outbox-42' });
  });

  it('keeps publish order per partition in publishMany', async () => {
    const results = await publisher.publishMany(Array.from({ length: 50 }, (_, n) => ({ event: 'seq', data: { n }, key: 'same' })));
    const partition = results[0].partition;
    expect(results.every((r) => r.partition === partition)).toBe(true);
    const entries = await redis.xrange(keys.stream(partition), results[0].offset, '+');
    const ns = entries.map(([, f]) => JSON.parse(f[f.indexOf('data') + 1]).n);
    expect(ns).toEqual(Array.from({ length: 50 }, (_, n) => n));
  });

  it('publishMany over several partitions, with dedup events between the others and more events than one script call takes, keeps each partition in call order', async () => {
    // 2600 events over 4 partitions (runs of up to 1000 per appendMany call), every 97th with its own id (sent on its own, between runs).
    const inputs = Array.from({ length: 2600 }, (_, n) => ({
      event: 'mixed',
      data: { n },
      key: `k${n % 7}`,
      ...(n % 97 === 0 ? { id: `mixed-${prefix}-${n}` } : {}),
    }));
    const results = await publisher.publishMany(inputs);
    expect(results).toHaveLength(inputs.length);
    results.forEach((r, n) => {
      expect(r.partition).toBe(partitionForKey(`k${n % 7}`, 4));
      if (n % 97 === 0) expect(r.id).toBe(`mixed-${prefix}-${n}`);
      else expect(r.id).toBe(derivedEventId(keys.logTag, r.partition, r.offset));
    });
    for (let partition = 0; partition < 4; partition++) {
      const mine = results.flatMap((r, n) => (r.partition === partition ? [n] : []));
      if (mine.length === 0) continue;
      const entries = await redis.xrange(keys.stream(partition), results[mine[0]].offset, results[mine[mine.length - 1]].offset);
      const written = entries
        .filter(([, f]) => f[f.indexOf('event') + 1] === 'mixed')
        .map(([, f]) => JSON.parse(f[f.indexOf('data') + 1]).n);
      expect(written).toEqual(mine);
      expect(entries.map(([offset]) => offset).filter((o) => mine.some((n) => results[n].offset === o))).toHaveLength(mine.length);
    }
  });

  it('publishMany reports which events were not appended when one partition refuses them, and appends the others', async () => {
    const other = uniquePrefix('pub-exhausted');
    const otherKeys = new EventrailKeys(other, 2);
    const otherApp = await createApp({ prefix: other, partitions: 2 });
    try {
      // A stream whose last id is the largest there is refuses every XADD *.
      await redis.xadd(otherKeys.stream(1), '18446744073709551615-18446744073709551615', 'event', 'last', 'data', '{}');
      const inputs = Array.from({ length: 40 }, (_, n) => ({ event: 'split', data: { n }, partition: n % 2 }));
      const otherPublisher = otherApp.get(EventrailPublisher);
      // The first publishMany asks (in the background) whether the script may run; after it, runs go through appendMany.
      await otherPublisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n }, partition: 0 })));
      const error = await otherPublisher.publishMany(inputs).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PublishManyError);
      expect(error).toBeInstanceOf(RedisUnavailableError);
      expect(String((error as Error).message)).toContain('20 appended, 20 not appended');
      expect((error as PublishManyError).outcomes).toEqual(inputs.map((_, n) => (n % 2 === 0 ? 'appended' : 'not-appended')));
      const appended = (await redis.xrange(otherKeys.stream(0), '-', '+')).filter(([, f]) => f[f.indexOf('event') + 1] === 'split');
      expect(appended.map(([, f]) => JSON.parse(f[f.indexOf('data') + 1]).n)).toEqual(Array.from({ length: 20 }, (_, i) => i * 2));
      expect(await redis.xlen(otherKeys.stream(1))).toBe(1);
      // A lone publish that Redis refuses says nothing was appended (an error reply is no lost answer).
      const refused = await otherPublisher.publish('split', { n: 40 }, { partition: 1 }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(RedisUnavailableError);
      expect((refused as Error).message).toMatch(/^Redis is unavailable: publish of "split" was refused, nothing was appended \(ERR /);
      expect(await redis.xlen(otherKeys.stream(1))).toBe(1);
    } finally {
      await otherApp.close();
      await deletePrefix(redis, other);
    }
  });

  it('coalesces concurrent publish calls and keeps their call order, also against a publishMany sent right after', async () => {
    const calls = Array.from({ length: 500 }, (_, n) => publisher.publish('seq', { n }, { key: 'coalesced' }));
    const after = publisher.publishMany([{ event: 'seq', data: { n: 500 }, key: 'coalesced' }]);
    const results = [...(await Promise.all(calls)), ...(await after)];
    const partition = results[0].partition;
    const entries = await redis.xrange(keys.stream(partition), results[0].offset, '+');
    expect(entries.map(([offset]) => offset)).toEqual(results.map((r) => r.offset));
    expect(entries.map(([, f]) => JSON.parse(f[f.indexOf('data') + 1]).n)).toEqual(Array.from({ length: 501 }, (_, n) => n));
    expect(new Set(results.map((r) => r.id)).size).toBe(501);
    for (const r of results) expect(r.id).toBe(derivedEventId(keys.logTag, partition, r.offset));
  });

  describe('refuses bad input with a typed error and appends nothing', () => {
    const cycle: Record<string, unknown> = {};
    cycle.me = cycle;
    it.each<[string, () => Promise<unknown>, new (...args: never[]) => Error, string]>([
      ['an empty event name', () => publisher.publish('', {}), InvalidEventNameError, 'must not be empty'],
      ['an over-long event name', () => publisher.publish('e'.repeat(300), {}), InvalidEventNameError, 'over 256'],
      ['control characters', () => publisher.publish('a\u0007b', {}), InvalidEventNameError, 'control characters'],
      ['undefined data', () => publisher.publish('e', undefined), InvalidEventDataError, 'data is undefined'],
      ['a function', () => publisher.publish('e', { f: () => 0 }), InvalidEventDataError, 'data.f is a function'],
      ['a symbol', () => publisher.publish('e', { s: Symbol('s') }), InvalidEventDataError, 'data.s is a symbol'],
      ['a BigInt', () => publisher.publish('e', { n: 1n }), InvalidEventDataError, 'data.n is a BigInt'],
      ['NaN', () => publisher.publish('e', { x: [NaN] }), InvalidEventDataError, 'data.x[0] is NaN'],
      ['Infinity', () => publisher.publish('e', { x: -Infinity }), InvalidEventDataError, 'data.x is -Infinity'],
      ['a cycle', () => publisher.publish('e', cycle), InvalidEventDataError, 'data.me is a circular reference'],
      ['a Date', () => publisher.publish('e', { at: new Date() }), InvalidEventDataError, 'data.at is an instance of Date'],
      ['a Map', () => publisher.publish('e', { m: new Map() }), InvalidEventDataError, 'data.m is an instance of Map'],
      ['an oversized payload', () => publisher.publish('e', { s: 'x'.repeat(2000) }), PayloadTooLargeError, 'over maxPayloadBytes (1000)'],
      ['a multi-byte oversized payload', () => publisher.publish('e', { s: 'é'.repeat(600) }), PayloadTooLargeError, 'is 1208 bytes'],
      ['a numeric header', () => publisher.publish('e', {}, { headers: { n: 1 as never } }), InvalidHeadersError, 'header "n"'],
      ['an empty key', () => publisher.publish('e', {}, { key: '' }), InvalidPublishOptionsError, 'option key'],
      ['a partition out of range', () => publisher.publish('e', {}, { partition: 4 }), InvalidPublishOptionsError, 'from 0 to 3'],
      [
        'a partition with a key',
        () => publisher.publish('e', {}, { partition: 1, key: 'k' }),
        InvalidPublishOptionsError,
        'cannot be combined',
      ],
      [
        'a batch with one bad event',
        () =>
          publisher.publishMany([
            { event: 'ok', data: 1 },
            { event: 'bad', data: { d: new Date() } },
          ]),
        InvalidEventDataError,
        'data.d',
      ],
    ])('%s', async (_, call, type, message) => {
      const before = await logLength();
      const error = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(type);
      expect((error as Error).message).toContain(message);
      expect(await logLength()).toBe(before);
    });
  });
});
