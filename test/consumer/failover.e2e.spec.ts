import { waitFor } from '../support/helpers';
import { E2eWorld, keyedEvents, orderViolations } from '../support/e2e-harness';

// Membership expires well before the leases, so the survivor wants the victim's
// partitions early and the wait it shows is the lease's, not the membership's.
const LOCK_TTL_MS = 2500;
const HEARTBEAT_TTL_MS = 1000;
/** The consumer renews leases every third of the shorter TTL. */
const RENEW_EVERY_MS = Math.floor(Math.min(LOCK_TTL_MS, HEARTBEAT_TTL_MS) / 3);

/**
 * A worker SIGKILLed mid-batch: its leases are not released, so the survivor
 * takes its partitions only once they expire, and replays from the last
 * commit: every event is handled at least once, in per-key order.
 */
describe('e2e: failover after a worker is killed', () => {
  const world = new E2eWorld('e2e-failover', 8);

  beforeAll(() => world.start());
  afterAll(() => world.stop());

  it('the survivor takes over after the lease TTL and handles everything', async () => {
    const consumer = { concurrency: 2, batchSize: 10, lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: HEARTBEAT_TTL_MS };
    const [victim, survivor] = await world.fleet.spawnAll([
      world.worker({ name: 'victim', consumer, delayMs: [10, 20] }),
      world.worker({ name: 'survivor', consumer, delayMs: [10, 20] }),
    ]);
    const owners = await world.waitForSplit([victim.workerId, survivor.workerId], [4, 4]);
    const victimPartitions = owners.flatMap((o, p) => (o === victim.workerId ? [p] : []));

    // A backlog of ~4 s for each worker, so the victim dies mid-batch.
    const published = await world.publish(keyedEvents(40, 15));
    await waitFor(() => victim.handled().length >= 30, 'victim handling its backlog');
    victim.signal('SIGKILL');
    const killedAt = Date.now();
    await victim.exited;

    const finished = new Set(victim.handled().map((h) => h.id));
    const inFlight = victim.started().filter((s) => !finished.has(s.id));
    expect(inFlight.length).toBeGreaterThan(0); // it really died mid-batch

    await world.waitForSplit([survivor.workerId], [8], LOCK_TTL_MS + HEARTBEAT_TTL_MS + 10_000);
    const takeoverMs = Date.now() - killedAt;
    const firstTakenOver = await waitFor(
      () => survivor.started().find((s) => victimPartitions.includes(s.partition) && s.startedAt >= killedAt),
      'survivor handling a partition of the victim',
    );
    const recoveryMs = firstTakenOver.startedAt - killedAt;
    // Not before the victim's lease could have expired (renewed about RENEW_EVERY_MS before
    // the kill at most; 500 ms for a renewal timer late on a loaded host)...
    expect(recoveryMs).toBeGreaterThanOrEqual(LOCK_TTL_MS - RENEW_EVERY_MS - 500);
    // ...and not long after: one TTL, then the survivor's tick, its acquire and read connection, and
    // its semaphore (shared with its own backlog), with room for a loaded host.
    expect(recoveryMs).toBeLessThan(LOCK_TTL_MS + 5_000);

    await world.waitForHandled(published.map((p) => p.id));
    const rehandled = new Set(survivor.handled().map((h) => h.id));
    expect(inFlight.filter((s) => !rehandled.has(s.id))).toEqual([]);
    expect(orderViolations(world.fleet.handled)).toEqual([]);
    console.log(
      `failover: ${inFlight.length} in flight at kill, survivor took over after ${Math.round(recoveryMs)} ms, held all leases after ${takeoverMs} ms, ` +
        `${world.fleet.handled.length - published.length} redeliveries`,
    );
  });
});
