import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { renderGroup } from '../../lib/cli/commands/group.view';
import { evaluateGroup } from '../../lib/health/group-health';
import { EventrailKeys } from '../../lib/redis/keys';
import { DurableRedis } from '../faults/support/durable-redis';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

/**
 * Attacks on operators' lease take-backs being revocations ("revoked:<token>"
 * for the rest of the lease's TTL, cleared by the holder once its handlers
 * ended): promptness after a forced reset, a holder that missed the signal,
 * resets in a row, a reset during a graceful stop, and what the group status
 * shows meanwhile.
 */

const GROUP = 'ledger';
const EVENT = 'entry.booked';

/** Every handler call, by app; times are performance.now() (all apps run in this process). */
type Call = { app: string; n: number; start: number; end?: number };
const calls: Call[] = [];
/** Handlers of these entries wait until the gate opens: holds a worker mid-handler without a fixed sleep. */
const gates = new Map<number, { open: () => void; opened: Promise<void> }>();
/** Handlers of these entries take this long, on their first call only: a slow handler, part of the workload. */
const slowFirstCall = new Map<number, number>();

function gate(n: number): () => void {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  gates.set(n, { open, opened });
  return open;
}

function ledger(app: string, options: { lockTtlMs?: number; shutdownTimeoutMs?: number } = {}): new () => unknown {
  @Injectable()
  class Ledger {
    @OnEvent(EVENT, { group: GROUP, heartbeatTtlMs: options.lockTtlMs, enableIdempotency: true, ...options })
    async book(message: EventrailMessage<{ n: number }>): Promise<void> {
      const { n } = message.data;
      const call: Call = { app, n, start: performance.now() };
      calls.push(call);
      await gates.get(n)?.opened;
      const slow = slowFirstCall.get(n);
      if (slow !== undefined) {
        slowFirstCall.delete(n);
        await new Promise((resolve) => setTimeout(resolve, slow));
      }
      call.end = performance.now();
    }
  }
  return Ledger;
}

/** While true, the handler of entry 1 throws: its key's line is parked behind it (`ordering: 'key'`). */
let failFirst = false;

function parkingLedger(app: string): new () => unknown {
  const fast = { concurrency: 4, lockTtlMs: 2_000, heartbeatTtlMs: 2_000, maxRetries: 1, retryBackoffMs: 5, retryBackoffMaxMs: 10 };
  @Injectable()
  class ParkingLedger {
    @OnEvent(EVENT, {
      group: GROUP,
      ordering: 'key',
      enableIdempotency: true,
      ...fast,
      redelivery: { delayMs: 40, factor: 2, maxDelayMs: 200 },
    })
    async book(message: EventrailMessage<{ n: number }>): Promise<void> {
      const { n } = message.data;
      const call: Call = { app, n, start: performance.now() };
      calls.push(call);
      await gates.get(n)?.opened;
      if (n === 1 && failFirst) throw new Error('the dependency of entry 1 is down');
      call.end = performance.now();
    }
  }
  return ParkingLedger;
}

/** Calls in start order, cut into runs of one app: an app in two runs worked the partition twice, or alongside another. */
function ownerRuns(list: readonly Call[]): string[] {
  const runs: string[] = [];
  for (const c of [...list].sort((a, b) => a.start - b.start)) if (runs[runs.length - 1] !== c.app) runs.push(c.app);
  return runs;
}

describe('revoked leases under attack (in-process workers)', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  const apps: INestApplicationContext[] = [];

  const start = async (app: string, options?: Parameters<typeof ledger>[1]) => {
    const created = await createApp({ prefix, partitions: 1 }, [ledger(app, options)]);
    apps.push(created);
    return created;
  };
  const lease = () => redis.get(keys.lease(GROUP, 0));

  beforeEach(() => {
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('revoke-attack');
    keys = new EventrailKeys(prefix, 1);
    calls.length = 0;
    gates.clear();
    slowFirstCall.clear();
    failFirst = false;
  });

  afterEach(async () => {
    for (const g of gates.values()) g.open();
    for (const app of apps.splice(0)) await app.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('with the default lockTtlMs, a forced reset during a slow handler gives the partition back as soon as the handler ends, skipping nothing', async () => {
    const first = await start('first');
    const publisher = first.get(EventrailPublisher);
    slowFirstCall.set(2, 1_500);
    await publisher.publishMany([1, 2, 3].map((n) => ({ event: EVENT, data: { n } })));
    await waitFor(() => calls.some((c) => c.n === 2), 'entry 2 started');

    const resetAt = performance.now();
    await first.get(EventrailAdmin).resetOffsets(GROUP, 'start', { force: true });
    expect(await lease()).toMatch(/^revoked:/);
    await waitFor(() => calls.filter((c) => c.n === 3).length >= 1 && calls.filter((c) => c.n === 1).length === 2, 'entries handled again');
    const again = calls.filter((c) => c.start > resetAt);
    const slowEnd = calls.find((c) => c.n === 2)!.end!;
    const retakeMs = Math.min(...again.map((c) => c.start)) - slowEnd;
    // Measured: about 1.5 s after the reset (the slow handler's rest), a few ms after it ended; 30 s is the TTL
    // (5 s of room for a loaded host's stalls).
    expect(retakeMs).toBeGreaterThanOrEqual(0);
    expect(retakeMs).toBeLessThan(5_000);
    // The reset asked for everything again: 1, 2 and 3 each started after it (the reset cleared the done-marks).
    for (const n of [1, 2, 3]) expect(again.some((c) => c.n === n)).toBe(true);
  });

  it('a holder whose subscriber was killed just before a forced reset never works alongside another worker', async () => {
    const lockTtlMs = 1_500;
    const first = await start('first', { lockTtlMs });
    const publisher = first.get(EventrailPublisher);
    await publisher.publish(EVENT, { n: 1 });
    await waitFor(() => calls.some((c) => c.n === 1), 'entry 1 handled by the first app');
    await start('second', { lockTtlMs });

    // Both apps' subscribers go; the reset's announce is sent while they reconnect.
    await redis.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    const resetAt = performance.now();
    await first.get(EventrailAdmin).resetOffsets(GROUP, 'end', { force: true });
    for (let n = 2; n < 60; n++) {
      await publisher.publish(EVENT, { n });
      await waitFor(() => calls.some((c) => c.n === n), `entry ${n} started`, 20_000);
    }
    const after = calls.filter((c) => c.start > resetAt);
    // No app works the partition in two runs (which would mean two owners at once, or one after the other and back).
    const runs = ownerRuns(after);
    expect(new Set(runs).size).toBe(runs.length);
    // Nothing skipped. An entry may run twice, but only by the holder that missed the signal: its commit of
    // it was fenced, so no done-mark was written, and it handles it again from the new offset.
    for (let n = 2; n < 60; n++) {
      const ofN = after.filter((c) => c.n === n);
      expect(ofN.length).toBeGreaterThanOrEqual(1);
      expect(new Set(ofN.map((c) => c.app)).size).toBe(1);
    }
  }, 60_000);

  it('five forced resets in a row, with a handler running: the partition comes back within a lockTtlMs and nothing after the last reset is lost', async () => {
    const lockTtlMs = 2_000;
    const first = await start('first', { lockTtlMs });
    await start('second', { lockTtlMs });
    const publisher = first.get(EventrailPublisher);
    const admin = first.get(EventrailAdmin);
    const open = gate(1);
    await publisher.publishMany([1, 2, 3, 4, 5].map((n) => ({ event: EVENT, data: { n } })));
    await waitFor(() => calls.some((c) => c.n === 1), 'entry 1 started');
    for (let i = 0; i < 5; i++) await admin.resetOffsets(GROUP, 'start', { force: true });
    const lastReset = performance.now();
    expect(await lease()).toMatch(/^revoked:/);
    open();
    await waitFor(() => [1, 2, 3, 4, 5].every((n) => calls.some((c) => c.n === n && c.start > lastReset && c.end)), 'all handled again');
    const retakeMs = Math.min(...calls.filter((c) => c.start > lastReset).map((c) => c.start)) - lastReset;
    expect(retakeMs).toBeLessThan(lockTtlMs);
    const runs = ownerRuns(calls.filter((c) => c.start > lastReset));
    expect(new Set(runs).size).toBe(runs.length);
  });

  // Was broken (fixed: leaseOwner names a revoked lease's holder): measured leaseOwner 'revoked:<workerId>' (no such member) for the rest of the revoked lease
  // (19,964 ms left of a 20 s TTL while a handler runs); the CLI's group view lists it under LEASE OWNER
  // and the member with no partition; the health check is down with "partition 0 (revoked:<workerId>):
  // lease held by a worker that is not a live member".
  it("shows a revoked lease as its holder's (or as no owner), not as a lease of a worker that is not a live member", async () => {
    const first = await start('first', { lockTtlMs: 20_000 });
    const open = gate(1);
    await first.get(EventrailPublisher).publish(EVENT, { n: 1 });
    await waitFor(() => calls.some((c) => c.n === 1), 'entry 1 started');
    const admin = first.get(EventrailAdmin);
    await admin.resetOffsets(GROUP, 'start', { force: true });
    expect(await lease()).toMatch(/^revoked:/);

    const status = await admin.group(GROUP);
    const member = status.members[0].workerId;
    const owner = status.partitions[0].leaseOwner;
    const view = renderGroup(status);
    const health = evaluateGroup(status, { running: true, workerId: member, ownedHere: [] }, {});
    open();
    expect([member, null]).toContain(owner);
    expect(view).not.toContain('revoked:');
    expect(health.problems).toEqual([]);
  });

  // Was broken (fixed: a fenced final commit still clears the worker's own revoked lease once its handlers ended):
  // measured 5,957-5,987 ms (4 runs of 5; lockTtlMs 6,000) from the holder's stop resolving to the
  // other worker's first start. The stopping holder never hears the reset (a stopped group does not tick),
  // its final commit is fenced, commitAndRelease then skips the release (`!this.lost`), and the revoked
  // lease waits out its TTL. Deleted, as before, it was taken at once.
  it('a forced reset while the holder stops gracefully: the next worker takes the partition as soon as the handler ended', async () => {
    const lockTtlMs = 6_000;
    const first = await start('first', { lockTtlMs });
    const second = await start('second', { lockTtlMs });
    const open = gate(1);
    await first.get(EventrailPublisher).publish(EVENT, { n: 1 });
    await waitFor(() => calls.some((c) => c.n === 1), 'entry 1 started');
    const holder = calls.find((c) => c.n === 1)!.app;
    const [stopping, staying] = holder === 'first' ? [first, second] : [second, first];
    // The stop is under way (the group stopped ticking) before this returns: the reset lands during it.
    const closed = stopping.get(EventrailConsumers).stop();
    await staying.get(EventrailAdmin).resetOffsets(GROUP, 'start', { force: true });
    expect(await lease()).toMatch(/^revoked:/);
    open();
    await closed;
    const closedAt = performance.now();
    await waitFor(() => calls.some((c) => c.app !== holder && c.n === 1), 'the other worker handles entry 1 again', 20_000);
    const takenMs = calls.find((c) => c.app !== holder && c.n === 1)!.start - closedAt;
    expect(takenMs).toBeLessThan(lockTtlMs / 2);
  }, 30_000);

  it("a forced reset with a parked key ('key' ordering) and a handler running: the partition comes back, the key's order holds, nothing is lost", async () => {
    const first = await createApp({ prefix, partitions: 1 }, [parkingLedger('first')]);
    apps.push(first);
    failFirst = true;
    const open = gate(3);
    const publisher = first.get(EventrailPublisher);
    await publisher.publishMany([
      { event: EVENT, data: { n: 1 }, key: 'a' },
      { event: EVENT, data: { n: 2 }, key: 'a' },
    ]);
    await waitFor(
      () => calls.filter((c) => c.n === 1).length >= 3,
      () => `entry 1 parked and redelivered: ${JSON.stringify(calls)}`,
    );
    await publisher.publish(EVENT, { n: 3 }, { key: 'b' });
    await waitFor(() => calls.some((c) => c.n === 3), 'entry 3 running');
    expect(calls.some((c) => c.n === 2)).toBe(false);

    await first.get(EventrailAdmin).resetOffsets(GROUP, 'start', { force: true });
    const resetAt = performance.now();
    expect(await lease()).toMatch(/^revoked:/);
    failFirst = false;
    open();
    await waitFor(
      () => [1, 2, 3].every((n) => calls.some((c) => c.n === n && c.start > resetAt && c.end)),
      'every entry handled after the reset',
    );
    const after = calls.filter((c) => c.start > resetAt);
    expect(Math.min(...after.map((c) => c.start)) - resetAt).toBeLessThan(2_000);
    // Key 'a' in order: entry 2 starts only after entry 1 succeeded.
    const firstDone = Math.min(...after.filter((c) => c.n === 1 && c.end).map((c) => c.end!));
    expect(after.filter((c) => c.n === 2).every((c) => c.start >= firstDone)).toBe(true);
  });
});

describe('a revoked lease through a Redis restart (AOF)', () => {
  let server: DurableRedis;
  const apps: INestApplicationContext[] = [];

  beforeEach(async () => {
    server = await DurableRedis.start();
    calls.length = 0;
    gates.clear();
    slowFirstCall.clear();
  });

  afterEach(async () => {
    for (const g of gates.values()) g.open();
    for (const app of apps.splice(0)) await app.close();
    await server.destroy();
  });

  it('a forced reset, then Redis killed and restarted while the holder ends its handler: the partition comes back within a lockTtlMs of Redis answering, nothing lost', async () => {
    const lockTtlMs = 2_000;
    const options = { redis: server.url, prefix: uniquePrefix('revoke-restart'), partitions: 1 };
    const first = await createApp(options, [ledger('first', { lockTtlMs })]);
    apps.push(first);
    apps.push(await createApp(options, [ledger('second', { lockTtlMs })]));
    const open = gate(1);
    await first.get(EventrailPublisher).publishMany([1, 2, 3].map((n) => ({ event: EVENT, data: { n } })));
    await waitFor(() => calls.some((c) => c.n === 1), 'entry 1 started');

    await first.get(EventrailAdmin).resetOffsets(GROUP, 'start', { force: true });
    const resetAt = performance.now();
    // The holder's handler ends while Redis is down: it cannot clear its revoked lease.
    const restart = server.crashAndRestart(500);
    open();
    await restart;
    const backAt = performance.now();
    // Calls from before the new server was spawned ran on the holder's fenced batch, while Redis was down.
    // The consumers may be served before `restart` settles here: count from the spawn, not from `backAt`.
    const spawnedAt = server.restartSpawnedAt!;
    const again = (): Call[] => calls.filter((c) => c.start > spawnedAt);
    const shown = (): string =>
      JSON.stringify(calls.map((c) => ({ ...c, start: Math.round(c.start - resetAt), end: c.end && Math.round(c.end - resetAt) })));
    // What the holder started after the reset was fenced: every entry is handled again once Redis is back.
    await waitFor(
      () => [1, 2, 3].every((n) => again().some((c) => c.n === n && c.end)),
      () => `every entry handled again; calls, ms after the reset: ${shown()}; server spawned at ${Math.round(spawnedAt - resetAt)}`,
      20_000,
    );
    const firstAgain = Math.min(...again().map((c) => c.start));
    expect(firstAgain - backAt).toBeLessThan(lockTtlMs + lockTtlMs / 3 + 500);
    const runs = ownerRuns(calls.filter((c) => c.start > resetAt));
    expect(new Set(runs).size).toBe(runs.length);
  }, 40_000);
});
