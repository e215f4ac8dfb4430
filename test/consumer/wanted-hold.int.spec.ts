import { Injectable, INestApplicationContext, Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const TTL_MS = 1_000;
/** The newer member's: its hold (3 x this from its expiry) outlasts the older app's start on a loaded host. */
const GHOST_TTL_MS = 2_000;
const handled: Array<{ event: string; at: number }> = [];

/** The older version of the service: no handler for `refund.issued` yet. */
@Injectable()
class OlderBilling {
  @OnEvent('order.placed', { group: 'billing', lockTtlMs: TTL_MS, heartbeatTtlMs: TTL_MS })
  placed(message: EventrailMessage): void {
    handled.push({ event: message.event, at: Date.now() });
  }
}

/**
 * A member gone without leaving keeps its types wanted for 3 x its
 * heartbeatTtlMs. That must not depend on a live member having seen it alive:
 * after a Redis outage longer than heartbeatTtlMs every member expired at
 * once, and a member of an older version that heartbeats first found nobody
 * wanting the newer types, took every partition and passed over their events
 * (soak seed 50009: events lost during a rolling deploy).
 */
describe('types of members whose heartbeat expired unseen', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;

  beforeEach(() => {
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('wanthold');
    handled.length = 0;
  });

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('stay wanted for 3 x its heartbeatTtlMs from its expiry, so an older member that joins first works nothing meanwhile', async () => {
    const keys = new EventrailKeys(prefix, 1);
    const [seconds, micros] = await redis.time();
    const expiredAt = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) - 100;
    // A newer member, as its last heartbeat left it before Redis went away: expired 100 ms ago, never forgotten.
    const ghost = 'newer-host:4242:feedbeef';
    await redis.zadd(keys.members('billing'), expiredAt, ghost);
    await redis.hset(
      keys.memberInfo('billing'),
      ghost,
      JSON.stringify({
        host: 'newer-host',
        pid: 4242,
        startedAt: expiredAt - 60_000,
        heartbeatTtlMs: GHOST_TTL_MS,
        events: ['order.placed', 'refund.issued'],
      }),
    );
    const warnings: string[] = [];
    const spy = jest.spyOn(Logger.prototype, 'warn').mockImplementation((message: unknown) => void warnings.push(String(message)));
    try {
      app = await createApp({ prefix, partitions: 1 }, [OlderBilling]);
      const publisher = app.get(EventrailPublisher);
      await publisher.publish('refund.issued', { n: 1 });
      await publisher.publish('order.placed', { n: 2 });
      await waitFor(
        () => warnings.some((w) => w.includes('refund.issued') && w.includes('works no partition')),
        () => `the older member says it lacks refund.issued (warnings: ${JSON.stringify(warnings)})`,
      );
      // Standing by: nothing handled, nothing committed past the refund while the newer member's types are held.
      expect(handled).toEqual([]);
      expect(await redis.get(keys.offset('billing', 0))).toBeNull();
      // Once the hold ran out (nobody came back), the group is the older member's: it handles what it can.
      await waitFor(() => handled.length === 1, 'order.placed handled once the hold ran out', 20_000);
      expect(handled[0].event).toBe('order.placed');
      const [s, us] = await redis.time();
      expect(Number(s) * 1000 + Math.floor(Number(us) / 1000)).toBeGreaterThanOrEqual(expiredAt + 3 * GHOST_TTL_MS);
    } finally {
      spy.mockRestore();
    }
  });
});
