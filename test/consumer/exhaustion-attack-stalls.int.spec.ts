import { Injectable, INestApplicationContext, Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { compareStreamIds } from '../../lib/wire/stream-id';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const LOCK_TTL_MS = 600;
const MAX_DELIVERIES = 2;

/** What the handler saw: every call, and the entries it finished. */
const world = { calls: [] as number[], finished: [] as number[] };

/** Blocks the event loop, the fault under test: no renewal, no commit, no timer runs meanwhile. */
function blockEventLoop(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // busy on purpose
  }
}

@Injectable()
class Renderer {
  @OnEvent('page.render', {
    group: 'renderer',
    ordering: 'partition',
    lockTtlMs: LOCK_TTL_MS,
    heartbeatTtlMs: LOCK_TTL_MS,
    maxDeliveries: MAX_DELIVERIES,
  })
  render(message: EventrailMessage<{ n: number; heavy: boolean }>): void {
    world.calls.push(message.data.n);
    // One entry whose work is CPU-bound and longer than the lease, every time it is handled.
    if (message.data.heavy) blockEventLoop(LOCK_TTL_MS * 1.8);
    world.finished.push(message.data.n);
  }
}

/**
 * Lease stalls of a live worker count no delivery. Attacked with a stall
 * that is not transient: one entry whose handling blocks the event loop past
 * the lease every time.
 */
describe('a stall that repeats on one entry', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;

  beforeEach(() => {
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('stallpoison');
    Object.assign(world, { calls: [], finished: [] });
  });

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  // A documented limit (docs/reference/guarantees.md): a process taking back its own lapsed lease counts no delivery
  // (a stall of a live process is not a crash), so an entry whose handler blocks the event loop past lockTtlMs every
  // time is never dead-lettered by maxDeliveries: its result is fenced (the lease lapsed), the same process takes the
  // lease back, reads it again, and so on without end (10 calls of entry 1 in about 11 s, no dead letter, entry 2
  // never handled). Counting such take-backs (053f01c) bounded it but dead-lettered healthy entries whose calls were
  // caught by stalls (test/consumer/stall-count-attack.int.spec.ts); the warning below is how an operator finds it.
  it.skip('an entry whose handling always blocks past the lease is not handled without end', async () => {
    app = await createApp({ prefix }, [Renderer]);
    const publisher = app.get(EventrailPublisher);
    await publisher.publish('page.render', { n: 1, heavy: true });
    await publisher.publish('page.render', { n: 2, heavy: false });
    const admin = app.get(EventrailAdmin);
    // Either the group moves past it (committed, or dead-lettered after maxDeliveries) and handles entry 2,
    // or it keeps handling entry 1: bounded here at 10 calls, five times maxDeliveries.
    await waitFor(
      async () => world.finished.includes(2) || world.calls.filter((n) => n === 1).length >= 5 * MAX_DELIVERIES,
      () => `entry 2 handled, or entry 1 called ${5 * MAX_DELIVERIES} times (calls so far: ${JSON.stringify(world.calls)})`,
      60_000,
    );
    const heavyCalls = world.calls.filter((n) => n === 1).length;
    console.log(
      `entry 1 called ${heavyCalls} times; entry 2 handled: ${world.finished.includes(2)}; dead letters: ${await admin.deadLetterCount('renderer')}`,
    );
    expect(world.finished).toContain(2);
    expect(heavyCalls).toBeLessThanOrEqual(MAX_DELIVERIES + 1);
  });

  it('an entry whose handling always blocks past the lease is named in a warning after 3 take-backs at its offset', async () => {
    const warnings: string[] = [];
    const spy = jest.spyOn(Logger.prototype, 'warn').mockImplementation((message: unknown) => {
      warnings.push(String(message));
    });
    try {
      app = await createApp({ prefix }, [Renderer]);
      const [published] = await app.get(EventrailPublisher).publishMany([{ event: 'page.render', data: { n: 1, heavy: true } }]);
      await waitFor(
        () => warnings.some((w) => w.includes('lease lapsed 3 times in a row')),
        () => `the warning (calls of entry 1 so far: ${world.calls.length}; warnings: ${JSON.stringify(warnings)})`,
        30_000,
      );
      const warning = warnings.find((w) => w.includes('lease lapsed 3 times in a row'))!;
      const [, offset] =
        /^Group "renderer" partition \d+: its lease lapsed 3 times in a row with the offset at (\d+-\d+);/.exec(warning) ?? [];
      // The offset it names is the one before the blocking entry: the entry after it is the one to look at.
      expect(offset).toBeDefined();
      expect(compareStreamIds(offset, published.offset)).toBeLessThan(0);
      expect(warning).toContain('keep CPU-bound work off the event loop');
    } finally {
      spy.mockRestore();
    }
  });
});
