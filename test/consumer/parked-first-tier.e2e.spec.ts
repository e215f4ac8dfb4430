/**
 * `redelivery.delayMs` is the wait before a parked message's first redelivery, whatever its retries in
 * place were; each failed redelivery multiplies it by `factor` (with jitter between half and all of it).
 */
import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

@Injectable()
class AlwaysDown {
  // maxRetries not set: the default retries in place of 'key' ordering (two).
  @OnEvent('account.changed', {
    group: 'tiers',
    ordering: 'key',
    retryBackoffMs: 5,
    retryBackoffMaxMs: 10,
    redelivery: { delayMs: 1_000, factor: 4, maxDelayMs: 60_000, maxAgeMs: 600_000 },
  })
  handle(message: EventrailMessage<{ n: number }>): void {
    throw new Error(`down (${message.data.n})`);
  }
}

describe('parked keys: the first redelivery waits delayMs', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;
  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked-tier');
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('a message parked after its retries in place is first redelivered within delayMs', async () => {
    app = await createApp({ prefix }, [AlwaysDown]);
    const admin = app.get(EventrailAdmin);
    await app.get(EventrailPublisher).publishMany([{ event: 'account.changed', data: { n: 1 }, key: 'A' }]);
    const [line] = await waitFor(async () => {
      const parked = await admin.parkedKeys('tiers');
      return parked.length === 1 && parked[0].attempts > 0 ? parked : undefined;
    }, 'A parked');
    expect(line.attempts).toBe(3); // the first attempt and the two retries in place
    // Jitter: between half and all of delayMs after it was parked (the last failure, at most a few ms after the first).
    const waitMs = line.nextAttemptAt.getTime() - line.firstFailedAt!.getTime();
    expect(waitMs).toBeLessThanOrEqual(1_000 + 200);
  });
});
