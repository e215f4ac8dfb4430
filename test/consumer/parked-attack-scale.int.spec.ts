import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { key: string; n: number };

/** Every key but 'healthy' fails while `down`; what was handled is recorded per key, in order. */
const dependency = {
  down: false,
  handled: new Map<string, number[]>(),
  call(message: EventrailMessage<Data>): void {
    if (this.down && message.data.key !== 'healthy') throw new Error(`${message.data.key} is down`);
    const seen = this.handled.get(message.data.key) ?? [];
    seen.push(message.data.n);
    this.handled.set(message.data.key, seen);
  },
};

@Injectable()
class ByKey {
  @OnEvent('account.changed', {
    group: 'many',
    ordering: 'key',
    maxRetries: 0,
    redelivery: { delayMs: 500, factor: 2, maxDelayMs: 1_000, maxAgeMs: 600_000 },
  })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

describe('parked keys under attack: many keys failing at once', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let app: INestApplicationContext | undefined;

  const parkedLines = async (): Promise<number> =>
    Object.keys(await redis.hgetall(keys.recovery('many', 0))).filter((field) => field.startsWith('park:')).length;
  const handledCount = () => [...dependency.handled.values()].reduce((sum, ns) => sum + ns.length, 0);

  /** Publishes `keyCount` keys x `perKey` messages while every key is down, and waits until each key has its line. */
  const parkAll = async (keyCount: number, perKey: number): Promise<EventrailPublisher> => {
    app = await createApp({ prefix }, [ByKey]);
    const publisher = app.get(EventrailPublisher);
    dependency.down = true;
    const events = [];
    for (let n = 1; n <= perKey; n++)
      for (let k = 0; k < keyCount; k++) events.push({ event: 'account.changed', data: { key: `k${k}`, n }, key: `k${k}` });
    for (let i = 0; i < events.length; i += 1_000) await publisher.publishMany(events.slice(i, i + 1_000));
    await waitFor(async () => (await parkedLines()) === keyCount, `all ${keyCount} lines parked`, 120_000, 200);
    return publisher;
  };
  /** Publishes one message of the healthy key and resolves with how long it took to be handled (ms). */
  const healthyLatency = async (publisher: EventrailPublisher, n: number, timeoutMs: number): Promise<number> => {
    const t = Date.now();
    await publisher.publish('account.changed', { key: 'healthy', n }, { key: 'healthy' });
    await waitFor(() => dependency.handled.get('healthy')?.length === n, `healthy message ${n} handled`, timeoutMs, 10);
    return Date.now() - t;
  };
  const expectEveryKeyInOrder = (perKey: number): void => {
    const expected = Array.from({ length: perKey }, (_, i) => i + 1);
    for (const [key, ns] of dependency.handled) if (key !== 'healthy') expect([key, ns]).toEqual([key, expected]);
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked-attack-many');
    keys = new EventrailKeys(prefix, 1);
    Object.assign(dependency, { down: false, handled: new Map() });
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  // Held (measured: parked in 2.6-3.8 s, a healthy key handled in 98-166 ms, 4,000 messages drained in 1.2-1.3 s).
  it('2,000 keys failing, then recovering: a healthy key goes on, and every key drains in order', async () => {
    const publisher = await parkAll(2_000, 2);
    expect(await healthyLatency(publisher, 1, 5_000)).toBeLessThan(5_000);
    dependency.down = false;
    await waitFor(
      () => handledCount() === 2_000 * 2 + 1,
      () => `all handled (${handledCount()})`,
      60_000,
      100,
    );
    await waitFor(async () => (await parkedLines()) === 0, 'every line released', 20_000, 100);
    expectEveryKeyInOrder(2);
  }, 200_000);

  // Found by an attack (fixed): every commit that changed a parked line read the whole recovery hash
  // back (HGETALL) to work out the parked floor, and every line that ended or fell due scanned and
  // sorted all lines again: a commit script with 32 arguments ran 250-276 ms in Redis, the event loop
  // stalled up to 28 s, and a healthy key's message waited from 0.9 s to more than 120 s. With the
  // floor sent by the owner and the lines due found in a heap, all 20,000 lines falling due together
  // still put it behind 20,000 failing calls (2-4 s, every handler call waits for a permit in turn);
  // with at most 128 lines run at once: worst 332 ms (median 1 ms), and the 20,000 keys back drained
  // in 2.9 s.
  it('20,000 keys failing: a healthy key is still handled within 2 s (p99; the worst within 5 s) while their lines cycle through the tiers', async () => {
    const publisher = await parkAll(20_000, 1);
    const until = Date.now() + 15_000;
    const latencies: number[] = [];
    for (let n = 1; Date.now() < until; n++) latencies.push(await healthyLatency(publisher, n, 60_000));
    const worst = Math.max(...latencies);
    const sorted = [...latencies].sort((x, y) => x - y);
    const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
    console.log(
      `20,000 lines cycling for 15 s: a healthy key's ${latencies.length} messages handled in median ${at(0.5)} ms, p99 ${at(0.99)} ms, worst ${worst} ms`,
    );
    // The p99 holds the 2 s; the worst one sample may be a loaded host's stall (701 and 1,113 ms seen in CI
    // runs, against the 28-120 s the bug gave).
    expect(at(0.99)).toBeLessThan(2_000);
    expect(worst).toBeLessThan(5_000);
    dependency.down = false;
    const back = Date.now();
    await waitFor(() => handledCount() - (dependency.handled.get('healthy')?.length ?? 0) === 20_000, 'all handled', 60_000, 200);
    console.log(`20,000 keys back: every line drained in ${Date.now() - back} ms`);
    expectEveryKeyInOrder(1);
  }, 400_000);
});
