import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { key: string; n: number };

const dependency = {
  down: new Set<string>(),
  handled: [] as number[],
  call(message: EventrailMessage<Data>): void {
    if (this.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    if (message.data.key === 'A') this.handled.push(message.data.n);
  },
};

@Injectable()
class ByKey {
  @OnEvent('account.changed', {
    group: 'backlog',
    ordering: 'key',
    maxRetries: 0,
    redelivery: { delayMs: 100, factor: 2, maxDelayMs: 200, maxAgeMs: 600_000 },
  })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

describe('parked keys under attack: a long line behind one failing key', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let app: INestApplicationContext | undefined;

  const lineIds = async (): Promise<number> => {
    const value = await redis.hget(keys.recovery('backlog', 0), 'park:k:A');
    return value ? (JSON.parse(value) as { ids: string[] }).ids.length : 0;
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked-attack-backlog');
    keys = new EventrailKeys(prefix, 1);
    Object.assign(dependency, { down: new Set(), handled: [] });
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  // Found by an attack (fixed): draining a line cost one commit per message, each writing the line's
  // whole JSON (every id still behind) and reading the recovery hash back: O(N^2) bytes for N messages;
  // 20,000 messages of one key (0.8 s unparked) drained in 108.6 s. Now a released line runs a batch
  // (batchSize) of its messages between two writes of it: 20,000 drained in 2.2 s.
  it('a key with 20,000 messages parked behind its head drains within 30 s once the key is back (0.8 s unparked)', async () => {
    const N = 20_000;
    app = await createApp({ prefix }, [ByKey]);
    const publisher = app.get(EventrailPublisher);
    dependency.down.add('A');
    const events = Array.from({ length: N }, (_, i) => ({ event: 'account.changed', data: { key: 'A', n: i + 1 }, key: 'A' }));
    for (let i = 0; i < events.length; i += 1_000) await publisher.publishMany(events.slice(i, i + 1_000));
    await waitFor(async () => (await lineIds()) === N, `all ${N} parked`, 120_000, 200);
    dependency.down.delete('A');
    const back = performance.now();
    await waitFor(
      () => dependency.handled.length === N,
      () => `all handled (${dependency.handled.length} of ${N})`,
      30_000,
      50,
    );
    console.log(`${N} messages parked behind one key drained in ${(performance.now() - back).toFixed(0)} ms once it was back`);
    expect(dependency.handled).toEqual(events.map((e) => e.data.n));
  }, 400_000);
});
