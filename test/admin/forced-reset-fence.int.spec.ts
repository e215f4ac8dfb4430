import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const LOCK_TTL_MS = 1500;

/** Every handler call, by app, with when it started (performance.now: both apps run in this process). */
type Call = { app: string; n: number; start: number };
const calls: Call[] = [];

function ledger(app: string): new () => unknown {
  @Injectable()
  class Ledger {
    @OnEvent('entry.booked', { group: 'ledger', lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: LOCK_TTL_MS, enableIdempotency: true })
    book(message: EventrailMessage<{ n: number }>): void {
      calls.push({ app, n: message.data.n, start: performance.now() });
    }
  }
  return Ledger;
}

/**
 * A forced offset reset (and a bar during a rolling deploy) takes the lease
 * from its holder without its consent. The holder normally hears it from the
 * rebalance signal, but that signal is best effort (a subscriber reconnecting
 * after a Redis outage misses it). Whether it heard or not, no other worker
 * may start on the partition while the holder still runs handlers it started:
 * the new owner would run entries the old one is running too, and the old one
 * may run entries after the new owner recorded them as done.
 *
 * This checks the property end to end; it does not reproduce the race on its
 * own (it passes with the lease deleted too: the first app hears the second
 * one join and finds its lease gone at once). The mechanism that closes the
 * race, a revoked lease that nobody can take, is pinned by
 * test/redis/revoke-lease.int.spec.ts, which fails when the lease is deleted.
 */
describe('a lease an operator takes back', () => {
  let redis: Redis;
  let prefix: string;
  const apps: INestApplicationContext[] = [];

  beforeEach(() => {
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('revoke');
    calls.length = 0;
  });

  afterEach(async () => {
    for (const app of apps.splice(0)) await app.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('is not worked by another worker while its holder, which missed the signal, may still start handlers', async () => {
    const first = await createApp({ prefix }, [ledger('first')]);
    apps.push(first);
    const publisher = first.get(EventrailPublisher);
    const [one] = await publisher.publishMany([{ event: 'entry.booked', data: { n: 1 } }]);
    await waitFor(() => calls.some((c) => c.n === 1), 'entry 1 handled by the first app');

    // The reset as the admin runs it, but with no rebalance signal sent: the first app hears nothing.
    await first.get(EventrailRedis).scripts.resetOffset({ group: 'ledger', partition: 0, to: one.offset });
    const second = await createApp({ prefix }, [ledger('second')]);
    apps.push(second);
    // One entry at a time, each once some app has started it, for about two lockTtlMs: long enough for the first
    // app's renewal to find its lease revoked and for the partition to change hands (to either app: both are members).
    const until = performance.now() + 2 * LOCK_TTL_MS;
    for (let n = 2; performance.now() < until; n++) {
      await publisher.publish('entry.booked', { n });
      await waitFor(() => calls.some((c) => c.n === n), `entry ${n} started`, 20_000);
    }

    // Never two owners at once: in start order, each app's calls after the reset form one run (A... then B...,
    // or A... alone), where a worker running on alongside a new owner would interleave them.
    const runs = calls.filter((c) => c.n > 1).reduce<string[]>((acc, c) => (acc.at(-1) === c.app ? acc : [...acc, c.app]), []);
    expect(runs.length).toBe(new Set(runs).size);
    // Nothing skipped: every entry after the reset offset was handled by the one app or the other.
    const last = Math.max(...calls.map((c) => c.n));
    for (let n = 2; n <= last; n++) expect(calls.some((c) => c.n === n)).toBe(true);
  });
});
