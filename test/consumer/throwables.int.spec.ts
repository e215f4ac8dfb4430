import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { describeThrown } from '../../lib/util/describe-error';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

class MessageGetterThrows extends Error {
  override get message(): string {
    throw new Error('message getter');
  }
}

/** Everything a handler can throw, each with the error name and message its dead letter must show. */
const THROWABLES: Array<{ kind: string; make: () => unknown; name: string; message: string }> = [
  { kind: 'a null-prototype object', make: () => Object.create(null) as unknown, name: 'object', message: '{}' },
  {
    kind: 'a null-prototype object with fields',
    make: () => Object.assign(Object.create(null) as object, { code: 'E_CARD' }),
    name: 'object',
    message: '{"code":"E_CARD"}',
  },
  { kind: 'a string', make: () => 'card declined', name: 'string', message: 'card declined' },
  { kind: 'undefined', make: () => undefined, name: 'undefined', message: 'undefined' },
  { kind: 'null', make: () => null, name: 'null', message: 'null' },
  {
    kind: 'an object whose toString throws',
    make: () => ({
      toString(): string {
        throw new Error('toString');
      },
    }),
    name: 'object',
    message: '{}',
  },
  {
    kind: 'a Proxy whose get trap throws',
    make: () =>
      new Proxy(
        {},
        {
          get(): never {
            throw new Error('get trap');
          },
        },
      ),
    name: 'object',
    message: 'a thrown value that cannot be described',
  },
  {
    kind: 'a Proxy whose getPrototypeOf trap throws',
    make: () =>
      new Proxy(
        { code: 7 },
        {
          getPrototypeOf(): never {
            throw new Error('getPrototypeOf trap');
          },
        },
      ),
    name: 'object',
    message: '{"code":7}',
  },
  {
    kind: 'a Proxy of an Error whose get trap throws',
    make: () =>
      new Proxy(new Error('hidden'), {
        get(): never {
          throw new Error('get trap');
        },
      }),
    name: 'Error',
    message: 'a thrown value that cannot be described',
  },
  { kind: 'a frozen object', make: () => Object.freeze({ reason: 'frozen' }), name: 'object', message: '{"reason":"frozen"}' },
  { kind: 'a number', make: () => 42, name: 'number', message: '42' },
  { kind: 'a Symbol', make: () => Symbol('boom'), name: 'symbol', message: 'Symbol(boom)' },
  {
    kind: 'an Error whose message getter throws',
    make: () => new MessageGetterThrows(),
    name: 'Error',
    message: 'a thrown value that cannot be described',
  },
  { kind: 'a plain Error', make: () => new RangeError('out of range'), name: 'RangeError', message: 'out of range' },
];

const handled = { fast: [] as number[], general: [] as number[] };

function maybeThrow(message: EventrailMessage<{ n: number }>, seen: number[]): void {
  const { n } = message.data;
  if (n >= 0) throw THROWABLES[n].make();
  seen.push(n);
}

@Injectable()
class Handlers {
  /** The one-handler fast path: the first attempt runs without an extra frame. */
  @OnEvent('thrown', { group: 'fast', maxRetries: 1, retryBackoffMs: 1, retryBackoffMaxMs: 2 })
  fast(message: EventrailMessage<{ n: number }>): void {
    maybeThrow(message, handled.fast);
  }

  /** The general path: a handler timeout and concurrency, so the batch runs by key. */
  @OnEvent('thrown', { group: 'general', maxRetries: 1, retryBackoffMs: 1, retryBackoffMaxMs: 2, handlerTimeoutMs: 5_000, concurrency: 4 })
  async general(message: EventrailMessage<{ n: number }>): Promise<void> {
    await Promise.resolve();
    maybeThrow(message, handled.general);
  }
}

describe('a handler may throw anything', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('thr');
    handled.fast = [];
    handled.general = [];
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it.each(THROWABLES.map((t) => [t.kind, t] as const))('describes %s without throwing', (_kind, throwable) => {
    const { name, message } = describeThrown(throwable.make());
    expect({ name, message }).toEqual({ name: throwable.name, message: throwable.message });
  });

  it('retries and dead-letters every kind of thrown value like an Error, and the partition goes on to the next entry', async () => {
    app = await createApp({ prefix, consumer: { ordering: 'partition' } }, [Handlers]);
    const published = await app
      .get(EventrailPublisher)
      .publishMany([...THROWABLES.map((_, n) => ({ event: 'thrown', data: { n } })), { event: 'thrown', data: { n: -1 } }]);
    const last = published[published.length - 1].offset;
    const keys = new EventrailKeys(prefix, 1);
    for (const group of ['fast', 'general']) {
      await waitFor(async () => (await redis.get(keys.offset(group, 0))) === last, `group ${group} committed past every throwable`, 10_000);
    }
    expect(handled).toEqual({ fast: [-1], general: [-1] });

    const admin = app.get(EventrailAdmin);
    for (const group of ['fast', 'general']) {
      const letters = await admin.deadLetters(group);
      // One dead letter per thrown value, in order: none was re-read and dead-lettered again.
      const seen = letters.map((l) => ({
        kind: THROWABLES[(l.data as { n: number }).n].kind,
        reason: l.reason,
        attempts: l.attempts,
        name: l.error.name,
        message: l.error.message,
      }));
      expect(seen).toEqual(
        THROWABLES.map((t) => ({ kind: t.kind, reason: 'retries-exhausted', attempts: 2, name: t.name, message: t.message })),
      );
      expect(letters[letters.length - 1].error.stack).toContain('out of range');
    }
  });
});
