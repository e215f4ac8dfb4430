import { Injectable } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const LOCK_TTL_MS = 1_000;

/** What happened, in order: handler calls and lease changes. */
const timeline: string[] = [];

@Injectable()
class Ledger {
  private paused = false;

  @OnEvent('entry.booked', 'ledger')
  book(message: EventrailMessage<{ n: number }>): void {
    timeline.push(`handled ${message.data.n}`);
    if (message.data.n !== 1 || this.paused) return;
    this.paused = true;
    // The process stalls (a long GC, a blocked event loop) past its lease: no renewal can run meanwhile.
    const until = performance.now() + LOCK_TTL_MS * 1.6;
    while (performance.now() < until) {
      // busy: this is the fault being injected, not a wait for a condition
    }
  }
}

describe('a worker whose lease may have expired starts no further handler call', () => {
  let redis: Redis;
  let prefix: string;

  beforeEach(() => {
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('expiry');
    timeline.length = 0;
  });

  afterEach(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('stops the batch in hand after a stall past the lease, until the lease is confirmed or taken again', async () => {
    const app = await createApp(
      {
        prefix,
        autoStart: false,
        consumer: { lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: LOCK_TTL_MS, batchSize: 10 },
        metrics: {
          onLeaseLost: () => timeline.push('lease lost'),
          onLeaseAcquired: () => timeline.push('lease acquired'),
        },
      },
      [Ledger],
    );
    try {
      await app.get(EventrailPublisher).publishMany([1, 2, 3].map((n) => ({ event: 'entry.booked', data: { n } })));
      await app.get(EventrailConsumers).start();
      await waitFor(
        () => timeline.includes('handled 3'),
        () => `all three handled (so far: ${timeline.join(', ')})`,
      );
      // Entry 2 came in the same batch as entry 1, but the worker must not start it on a lease that
      // expired while it stalled: it first learns (a fenced commit) that the lease is gone, takes the
      // partition again, and only then goes on. Before, it handled 2 and 3 at once on the dead lease.
      const lost = timeline.indexOf('lease lost');
      expect(lost).toBeGreaterThan(-1);
      expect(timeline.indexOf('handled 2')).toBeGreaterThan(lost);
      expect(timeline.slice(0, lost)).toEqual(['lease acquired', 'handled 1']);
    } finally {
      await app.close();
    }
  });
});
