/**
 * `redelivery.delayMs` is the wait before a parked message's first redelivery after its quick tiers;
 * each later failed redelivery multiplies it by `factor` (with jitter between half and all of it).
 */
import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

/** When the handler last threw (the host's clock, which Redis's is too): the wait runs from the last failure. */
let lastThrowAt = 0;

@Injectable()
class AlwaysDown {
  // maxRetries not set: the default quick tiers of 'key' ordering (two).
  @OnEvent('account.changed', {
    group: 'tiers',
    ordering: 'key',
    retryBackoffMs: 5,
    retryBackoffMaxMs: 10,
    redelivery: { delayMs: 1_000, factor: 4, maxDelayMs: 60_000, maxAgeMs: 600_000 },
  })
  handle(message: EventrailMessage<{ n: number }>): void {
    lastThrowAt = Date.now();
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

  it('a parked message past its quick tiers is redelivered within delayMs', async () => {
    app = await createApp({ prefix }, [AlwaysDown]);
    const admin = app.get(EventrailAdmin);
    await app.get(EventrailPublisher).publishMany([{ event: 'account.changed', data: { n: 1 }, key: 'A' }]);
    const [line] = await waitFor(async () => {
      const parked = await admin.parkedKeys('tiers');
      // The first attempt parks it; the two quick tiers (5 and 10 ms) fail too.
      return parked.length === 1 && parked[0].attempts === 3 ? parked : undefined;
    }, 'A parked, past its quick tiers');
    // Jitter: between half and all of delayMs after the last failure. The upper bound is taken from the last
    // throw, not the first failure: on a loaded host the two quick tiers alone took a few hundred ms.
    const waitMs = line.nextAttemptAt.getTime() - line.firstFailedAt!.getTime();
    expect(waitMs).toBeGreaterThanOrEqual(500);
    expect(line.nextAttemptAt.getTime() - lastThrowAt).toBeLessThanOrEqual(1_000 + 200);
  });
});
