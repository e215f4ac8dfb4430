import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import {
  EventrailPublisher,
  InvalidEventDataError,
  InvalidEventNameError,
  InvalidHeadersError,
  InvalidPublishOptionsError,
  PayloadTooLargeError,
} from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';
import { seededRandom as generator } from '../support/seeded-random';

type Random = () => number;
const int = (random: Random, max: number): number => Math.floor(random() * max);
const pick = <T>(random: Random, list: readonly T[]): T => list[int(random, list.length)];
/** Log-uniform from 1 to `max`: as many shallow cases as deep ones. */
const logInt = (random: Random, max: number): number => Math.max(1, Math.floor(Math.exp(random() * Math.log(max))));

const ALPHABET = ['a', 'Z', '-', '_', '.', ' ', 'é', '€', '😀', '\u0000', '\n', '\u007f', '\u0085', '\ud800', '"', '\\'];
function text(random: Random, length: number): string {
  // Mostly one repeated character, so long strings are cheap to make.
  const repeated = pick(random, ALPHABET).repeat(length);
  return random() < 0.5 ? repeated : Array.from({ length: Math.min(length, 50) }, () => pick(random, ALPHABET)).join('') + repeated;
}

class Money {
  amount = 1;
}
const throwingGetter = (): object =>
  Object.defineProperty({}, 'x', {
    enumerable: true,
    get: () => {
      throw new Error('getter');
    },
  });
const throwingProxy = (): object =>
  new Proxy([], {
    get: () => {
      throw new Error('trap');
    },
  });

function leaf(random: Random): unknown {
  return pick<() => unknown>(random, [
    () => null,
    () => true,
    () => random() * 1e6 - 5e5,
    () => -0,
    () => text(random, logInt(random, 300)),
    () => undefined,
    () => NaN,
    () => Infinity,
    () => 10n,
    () => Symbol('s'),
    () => () => 1,
    () => new Date(),
    () => new Map(),
    () => new Money(),
    () => Object.create(null) as object,
    // eslint-disable-next-line no-sparse-arrays
    () => [1, , 3],
    () => ({ toJSON: () => 'x' }),
    throwingGetter,
    throwingProxy,
  ])();
}

/** Nested arrays and objects, up to 100000 levels, built from the inside out (no recursion). */
function deep(random: Random): unknown {
  const depth = logInt(random, 100_000);
  const shape = int(random, 3);
  let value: unknown = random() < 0.8 ? int(random, 10) : leaf(random);
  for (let i = 0; i < depth; i++) {
    const array = shape === 0 || (shape === 2 && i % 2 === 0);
    value = array ? [value] : { [random() < 0.9 ? 'a' : text(random, 3)]: value };
  }
  if (random() < 0.1) {
    const root = { inner: value } as Record<string, unknown>;
    root.self = random() < 0.5 ? root : { back: root };
    return root;
  }
  return value;
}

function wide(random: Random): unknown {
  const count = logInt(random, 200);
  return random() < 0.5
    ? Array.from({ length: count }, () => (random() < 0.9 ? int(random, 100) : leaf(random)))
    : Object.fromEntries(Array.from({ length: count }, (_, i) => [text(random, int(random, 8)) + i, random() < 0.9 ? 'v' : leaf(random)]));
}

function data(random: Random): unknown {
  const kind = int(random, 3);
  return kind === 0 ? leaf(random) : kind === 1 ? deep(random) : wide(random);
}

function headers(random: Random): unknown {
  const kind = int(random, 10);
  if (kind === 0) return pick(random, [null, [], 'x', 1, new Map([['a', 'b']]), throwingGetter(), throwingProxy()]);
  if (kind === 1) return undefined;
  const count = int(random, 2) === 0 ? int(random, 5) : logInt(random, 100);
  const result: Record<string, unknown> = {};
  for (let i = 0; i < count; i++) {
    const name = random() < 0.8 ? `h${i}` : text(random, logInt(random, 300)) + i;
    const length = random() < 0.7 ? int(random, 60) : logInt(random, 9000);
    result[name] = random() < 0.95 ? text(random, length) : leaf(random);
  }
  return result;
}

const TYPED = [InvalidEventNameError, InvalidEventDataError, PayloadTooLargeError, InvalidHeadersError, InvalidPublishOptionsError];

describe('publish, for any data and headers', () => {
  const prefix = uniquePrefix('pubany');
  const keys = new EventrailKeys(prefix, 1);
  let app: INestApplicationContext;
  let publisher: EventrailPublisher;
  let redis: Redis;

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    app = await createApp({ prefix, partitions: 1, maxPayloadBytes: 256 * 1024 });
    publisher = app.get(EventrailPublisher);
  });

  afterAll(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it.each([1, 2, 3])('resolves or rejects with a typed error, and appends only what it resolved for (seed %i)', async (seed) => {
    const random = generator(seed);
    const outcomes = { resolved: 0, typed: 0 };
    for (let index = 0; index < 300; index++) {
      const value = data(random);
      const options = { headers: headers(random) as Record<string, string> };
      const before = await redis.xlen(keys.stream(0));
      const outcome = await publisher.publish('any.input', value, options).then(
        (result) => ({ result }),
        (error: unknown) => ({ error }),
      );
      const after = await redis.xlen(keys.stream(0));
      const where = `seed ${seed}, case ${index}`;
      if ('error' in outcome) {
        const typed = TYPED.some((type) => outcome.error instanceof type);
        expect({ where, error: typed ? 'typed' : outcome.error }).toEqual({ where, error: 'typed' });
        expect({ where, appended: after - before }).toEqual({ where, appended: 0 });
        outcomes.typed++;
        continue;
      }
      expect({ where, appended: after - before }).toEqual({ where, appended: 1 });
      // What was accepted is stored as JSON that reads back to the same value.
      const [[, fields]] = await redis.xrange(keys.stream(0), outcome.result.offset, outcome.result.offset);
      expect(JSON.parse(fields[fields.indexOf('data') + 1])).toEqual(JSON.parse(JSON.stringify(value)));
      outcomes.resolved++;
    }
    // publishMany validates the whole batch first: all of it is appended, or none.
    for (let index = 0; index < 60; index++) {
      const batch = Array.from({ length: 1 + int(random, 4) }, () => ({
        event: 'any.batch',
        data: random() < 0.7 ? { n: index } : data(random),
        headers: (random() < 0.7 ? undefined : headers(random)) as Record<string, string>,
      }));
      const before = await redis.xlen(keys.stream(0));
      const outcome = await publisher.publishMany(batch).then(
        () => 'resolved',
        (error: unknown) => (TYPED.some((type) => error instanceof type) ? 'typed' : error),
      );
      const appended = (await redis.xlen(keys.stream(0))) - before;
      const where = `seed ${seed}, batch ${index}`;
      expect({ where, outcome, appended }).toEqual({ where, outcome, appended: outcome === 'resolved' ? batch.length : 0 });
      expect({ where, outcome: outcome === 'resolved' || outcome === 'typed' }).toEqual({ where, outcome: true });
    }
    // The generator reaches both sides.
    expect(outcomes.resolved).toBeGreaterThan(20);
    expect(outcomes.typed).toBeGreaterThan(20);
  });
});
