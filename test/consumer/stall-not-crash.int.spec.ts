import { Injectable } from '@nestjs/common';
import Redis from 'ioredis';
import type { INestApplicationContext } from '@nestjs/common';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

jest.setTimeout(60_000);

let attempts = 0;

@Injectable()
class Payments {
  @OnEvent('payment.due', 'payments')
  charge(_message: EventrailMessage): void {
    attempts++;
    throw new Error('the payment provider is down');
  }
}

/**
 * A live worker that loses its lease without dying (a Redis stall, a network
 * blip, an event loop stalled past `lockTtlMs`) and takes its partition again
 * did not crash: the message it was retrying by time counts no delivery, and
 * is never dead-lettered as `max-deliveries` (for workers that died).
 */
describe('a live worker losing its lease is not a crash', () => {
  const redis = new Redis(testRedisUrl());
  let prefix: string;
  let keys: EventrailKeys;
  let app: INestApplicationContext;

  beforeEach(async () => {
    prefix = uniquePrefix('stall');
    keys = new EventrailKeys(prefix, 1);
    attempts = 0;
    app = await createApp(
      {
        prefix,
        consumer: {
          lockTtlMs: 1_000,
          heartbeatTtlMs: 1_000,
          maxDeliveries: 2,
          maxRetryAgeMs: 600_000,
          retryBackoffMs: 50,
          retryBackoffMaxMs: 100,
        },
      },
      [Payments],
    );
  });

  afterEach(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.quit());

  it('takes its partition back three times while retrying by time: no delivery counted, no dead letter', async () => {
    await app.get(EventrailPublisher).publish('payment.due', { amount: 5 });
    const lease = keys.lease('payments', 0);
    await waitFor(() => attempts >= 2, 'the payment retried');
    for (let loss = 1; loss <= 3; loss++) {
      const before = await redis.get(lease);
      // The lease ran out under the worker, as after a stall: gone, never released.
      await redis.del(lease);
      await waitFor(async () => {
        const now = await redis.get(lease);
        return now !== null && now !== before;
      }, `the partition taken again after loss ${loss}`);
      const seen = attempts;
      const deadLetters = (): Promise<number> => redis.xlen(keys.deadLetters('payments')).catch(() => 0);
      await waitFor(async () => attempts > seen || (await deadLetters()) > 0, `the payment retried after loss ${loss}`);
      expect(await deadLetters()).toBe(0);
    }
    const recovery = await redis.hgetall(keys.recovery('payments', 0));
    expect(recovery.deliveries ?? '0').toBe('0');
    expect(await redis.exists(keys.deadLetters('payments'))).toBe(0);
    // The same worker took it every time.
    expect(await redis.get(lease)).toMatch(new RegExp(`^${app.get(EventrailConsumers).workerId}:\\d+$`));
  });
});
