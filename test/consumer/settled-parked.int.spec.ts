import { INestApplicationContext, Injectable } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent, SettleTimeoutError } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

// A parked message is behind the committed offset but not done: settled() waits for it, and says so when it gives up.

const dependency = { down: new Set<string>(), handled: [] as string[] };

@Injectable()
class Payments {
  // Short redelivery tiers: once the key's dependency is back, its head is tried again within ~100 ms.
  @OnEvent('payment.made', {
    group: 'payments',
    ordering: 'key',
    maxRetries: 1,
    retryBackoffMs: 5,
    retryBackoffMaxMs: 10,
    redelivery: { delayMs: 40, factor: 2, maxDelayMs: 100, maxAgeMs: 600_000 },
  })
  handle(message: EventrailMessage<{ key: string; n: number }>): void {
    if (dependency.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    dependency.handled.push(`${message.data.key}${message.data.n}`);
  }
}

describe('EventrailConsumers.settled() with parked messages', () => {
  let redis: Redis;
  let prefix: string;
  let apps: INestApplicationContext[] = [];

  const start = async (): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, partitions: 1 }, [Payments]);
    apps.push(app);
    return app;
  };
  /** Parks A1 with A2 behind it while B1 is handled, and waits until the offset passed them all. */
  const parkA = async (app: INestApplicationContext): Promise<void> => {
    dependency.down.add('A');
    const published = await app
      .get(EventrailPublisher)
      .publishMany(['A1', 'A2', 'B1'].map((name) => ({ event: 'payment.made', data: { key: name[0], n: Number(name[1]) }, key: name[0] })));
    const admin = app.get(EventrailAdmin);
    await waitFor(async () => (await admin.parkedKeys('payments')).some((line) => line.count === 2), 'A parked, 2 deep');
    await waitFor(
      async () => (await admin.group('payments')).partitions[0].committed === published[2].offset,
      'the committed offset at the last entry',
    );
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('settlepark');
    Object.assign(dependency, { down: new Set(), handled: [] });
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('waits for the parked messages of a partition it works, though its offset is at the end', async () => {
    const app = await start();
    const consumers = app.get(EventrailConsumers);
    await parkA(app);

    const error = await consumers.settled({ timeoutMs: 300 }).then(
      () => null,
      (thrown: unknown) => thrown,
    );
    expect(error).toBeInstanceOf(SettleTimeoutError);
    const timeout = error as SettleTimeoutError;
    expect(timeout.lagging).toEqual([
      expect.objectContaining({ group: 'payments', partition: 0, ownedHere: true, parked: true, parkedCount: 2 }),
    ]);
    expect(timeout.lagging[0].committed).toBe(timeout.lagging[0].target);
    expect(timeout.message).toMatch(/group "payments" partition 0 at \S+ of \S+, waiting for 2 parked messages$/);

    dependency.down.delete('A');
    await consumers.settled({ timeoutMs: 10_000 });
    // Resolved only once the parked messages were handled and their line's release committed.
    expect(dependency.handled).toEqual(['B1', 'A1', 'A2']);
    expect(await app.get(EventrailAdmin).parkedKeys('payments')).toEqual([]);
  });

  it('waits for parked messages of a partition another process works, read from Redis', async () => {
    const owner = await start();
    await parkA(owner);
    // A second member of the group: the only partition stays with its owner, so this one reads it from Redis.
    const other = await start();
    const consumers = other.get(EventrailConsumers);
    await consumers.whenRunning();
    expect(consumers.ownership()).toEqual({ payments: [] });

    const error = (await consumers.settled({ timeoutMs: 400 }).then(
      () => null,
      (thrown: unknown) => thrown,
    )) as SettleTimeoutError;
    expect(error).toBeInstanceOf(SettleTimeoutError);
    expect(error.lagging).toEqual([expect.objectContaining({ partition: 0, ownedHere: false, parked: true, parkedCount: null })]);
    expect(error.message).toMatch(/, waiting for parked messages \(not owned by this process\)$/);

    dependency.down.delete('A');
    await consumers.settled({ timeoutMs: 10_000 });
    expect(dependency.handled).toEqual(['B1', 'A1', 'A2']);
  });
});
