import { waitFor } from '../support/helpers';
import { duplicates, E2eWorld, Flow, handoverOverlaps, orderViolations } from '../support/e2e-harness';

/** Long on purpose: a takeover that waited for expiry would take this long. */
const LOCK_TTL_MS = 20_000;
const HANDOVER_LIMIT_MS = 5_000;

/**
 * A worker closed gracefully (SIGTERM runs Nest's shutdown hooks) while events
 * flow: it finishes its running handlers, commits, releases its leases and
 * leaves the group, so the other worker takes every partition at once rather
 * than after the lease TTL, and nothing is lost or stuck.
 */
describe('e2e: graceful shutdown hands partitions over at once', () => {
  const world = new E2eWorld('e2e-graceful', 8);

  beforeAll(() => world.start());
  afterAll(() => world.stop());

  it('the remaining worker owns everything well before the lease TTL, and every event is handled', async () => {
    const consumer = { concurrency: 2, batchSize: 10, lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: LOCK_TTL_MS, shutdownTimeoutMs: 5000 };
    const [leaving, staying] = await world.fleet.spawnAll([
      world.worker({ name: 'leaving', consumer, delayMs: [2, 8] }),
      world.worker({ name: 'staying', consumer, delayMs: [2, 8] }),
    ]);
    const owners = await world.waitForSplit([leaving.workerId, staying.workerId], [4, 4]);
    const leavingPartitions = owners.flatMap((o, p) => (o === leaving.workerId ? [p] : []));

    const flow = new Flow(world, 16, 10);
    await waitFor(() => leaving.handled().length >= 50 && staying.handled().length >= 50, 'both workers handling events');
    leaving.signal('SIGTERM');
    const signalledAt = Date.now();
    await world.waitForSplit([staying.workerId], [8], HANDOVER_LIMIT_MS);
    const handoverMs = Date.now() - signalledAt;
    const exit = await leaving.exited;
    // Nest's shutdown hook re-raises the signal once the app is closed.
    expect(exit).toEqual({ code: null, signal: 'SIGTERM' });
    expect(leaving.output.join('\n')).not.toMatch(/ERROR|still running after/);

    await waitFor(
      () => staying.handled().some((h) => leavingPartitions.includes(h.partition) && h.startedAt > signalledAt),
      'staying worker handling the handed-over partitions',
    );
    const published = await flow.stop();
    await world.waitForHandled(published.map((p) => p.id));

    expect(handoverMs).toBeLessThan(HANDOVER_LIMIT_MS);
    expect(orderViolations(world.fleet.handled)).toEqual([]);
    // Graceful: the heir starts a partition only after the leaving worker's handlers there ended.
    expect(handoverOverlaps(world.fleet.handled)).toEqual([]);
    // With concurrency 2 a hand-back commits the low watermark, so an event done
    // past it may be redelivered; only ever from the leaving worker to the heir.
    const redelivered = duplicates(world.fleet.handled);
    for (const id of redelivered) {
      const pids = world.fleet.handled.filter((h) => h.id === id).map((h) => h.pid);
      expect(pids).toEqual([leaving.pid, staying.pid]);
    }
    console.log(
      `graceful: all leases held by the staying worker ${handoverMs} ms after SIGTERM; ${published.length} events, ${redelivered.length} redelivered`,
    );
  });
});
