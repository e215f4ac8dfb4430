/**
 * A parked head whose handler is slow holds back only its own line: the other parked keys of its
 * partition are redelivered side by side with it, under the group's `concurrency`.
 */
import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { key: string; n: number };
const dep = {
  down: new Set<string>(),
  slowMs: new Map<string, number>(),
  calls: [] as string[],
  handled: [] as Array<{ name: string; at: number }>,
  async call(message: EventrailMessage<Data>): Promise<void> {
    const name = `${message.data.key}${message.data.n}`;
    this.calls.push(name);
    const slow = this.slowMs.get(message.data.key);
    if (slow) await new Promise((r) => setTimeout(r, slow));
    if (this.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    this.handled.push({ name, at: Date.now() });
  },
};

@Injectable()
class KeyOrdered {
  @OnEvent('thing', {
    group: 'iso',
    ordering: 'key',
    concurrency: 4,
    lockTtlMs: 2_000,
    heartbeatTtlMs: 2_000,
    maxRetries: 0,
    retryBackoffMs: 5,
    redelivery: { delayMs: 50, factor: 1, maxDelayMs: 50, maxAgeMs: 600_000 },
  })
  handle(m: EventrailMessage<Data>) {
    return dep.call(m);
  }
}

describe('parked keys: one slow parked head holds back only its key', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;
  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked-iso');
    Object.assign(dep, { down: new Set(), slowMs: new Map(), calls: [], handled: [] });
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('with concurrency 4, a parked key that is back is redelivered while another parked head is slow', async () => {
    app = await createApp({ prefix }, [KeyOrdered]);
    dep.down.add('A');
    dep.down.add('B');
    await app
      .get(EventrailPublisher)
      .publishMany(['A', 'B'].flatMap((key) => [1, 2].map((n) => ({ event: 'thing', data: { key, n }, key }))));
    await waitFor(async () => (await app!.get(EventrailAdmin).parkedKeys('iso')).length === 2, 'A and B parked');
    // A's dependency now hangs for 8 s per call (still failing); B is back.
    dep.slowMs.set('A', 8_000);
    const callsOfA = dep.calls.filter((c) => c.startsWith('A')).length;
    await waitFor(() => dep.calls.filter((c) => c.startsWith('A')).length > callsOfA, "a slow redelivery of A's head running");
    dep.down.delete('B');
    const back = Date.now();
    await waitFor(() => dep.handled.filter((h) => h.name.startsWith('B')).length === 2, 'B1 and B2 handled', 12_000);
    const tookMs = Math.max(...dep.handled.filter((h) => h.name.startsWith('B')).map((h) => h.at)) - back;
    expect(tookMs).toBeLessThan(3_000);
    // Other keys are not held either.
    await app.get(EventrailPublisher).publishMany([{ event: 'thing', data: { key: 'C', n: 1 }, key: 'C' }]);
    await waitFor(() => dep.handled.some((h) => h.name === 'C1'), 'C1 handled', 3_000);
  });
});
