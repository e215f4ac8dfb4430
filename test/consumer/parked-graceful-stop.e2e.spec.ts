/**
 * A redelivery that a graceful shutdown cuts off (its handler outlives `shutdownTimeoutMs`) is not a
 * crash: the release is clean, so after any number of rolling restarts a slow head is never dead-lettered
 * as `max-deliveries`, as a slow message under `ordering: 'partition'` is not. Only a redelivery that dies
 * with its worker counts.
 */
import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { key: string; n: number };

/** A is down until told otherwise; a call of a name in `slowMs` takes that long first. */
const dependency = {
  down: new Set<string>(),
  slowMs: new Map<string, number>(),
  calls: [] as string[],
  async call(message: EventrailMessage<Data>): Promise<void> {
    const name = `${message.data.key}${message.data.n}`;
    this.calls.push(name);
    const slow = this.slowMs.get(name);
    if (slow) await new Promise((resolve) => setTimeout(resolve, slow));
    if (this.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
  },
};

const COMMON = {
  lockTtlMs: 2_000,
  heartbeatTtlMs: 2_000,
  maxRetries: 0,
  retryBackoffMs: 5,
  maxDeliveries: 2,
  shutdownTimeoutMs: 100,
} as const;

@Injectable()
class KeyOrdered {
  @OnEvent('account.changed', {
    group: 'by-key',
    ordering: 'key',
    ...COMMON,
    redelivery: { delayMs: 20, factor: 1, maxDelayMs: 20, maxAgeMs: 600_000 },
  })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

describe('parked keys: a graceful shutdown is not a crash', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked-stop');
    Object.assign(dependency, { down: new Set(), slowMs: new Map(), calls: [] });
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('a redelivery cut off by shutdownTimeoutMs in rolling restarts does not dead-letter the head as max-deliveries', async () => {
    dependency.down.add('A');
    app = await createApp({ prefix }, [KeyOrdered]);
    await app.get(EventrailPublisher).publishMany([1, 2].map((n) => ({ event: 'account.changed', data: { key: 'A', n }, key: 'A' })));
    await waitFor(async () => (await app!.get(EventrailAdmin).parkedKeys('by-key'))[0]?.count === 2, 'A1 parked with A2 behind it');
    // Each redelivery of A1 now outlives the shutdown timeout; three rolling restarts, each during one.
    dependency.slowMs.set('A1', 2_000);
    for (let restart = 0; restart < 3; restart++) {
      const calls = dependency.calls.length;
      await waitFor(() => dependency.calls.length > calls, 'a redelivery of A1 running');
      await app.close();
      app = await createApp({ prefix }, [KeyOrdered]);
    }
    dependency.slowMs.clear();
    dependency.down.delete('A');
    await waitFor(async () => (await app!.get(EventrailAdmin).parkedKeys('by-key')).length === 0, 'A released');
    const letters = await app.get(EventrailAdmin).deadLetters('by-key');
    expect(letters.map((letter) => `${letter.reason}: ${letter.error.message}`)).toEqual([]);
  });
});
