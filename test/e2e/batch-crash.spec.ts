import { waitFor } from '../support/helpers';
import { E2E_EVENT } from '../support/processes';
import { E2eWorld, orderViolations } from './harness';

const LOCK_TTL_MS = 1000;
const EVENTS = 12;

/**
 * A worker SIGKILLed while its batch handler holds a batch: nothing of the
 * batch was committed, so the worker that takes the partition over gets every
 * message of it again (one at a time while it counts deliveries, then in
 * batches), and nothing is lost.
 */
describe('e2e: a worker killed in the middle of a batch', () => {
  const world = new E2eWorld('e2e-batch-crash', 1);

  beforeAll(() => world.start());
  afterAll(() => world.stop());

  it('redelivers the whole batch to the next owner, in order', async () => {
    const consumer = { lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: LOCK_TTL_MS };
    const seqs = Array.from({ length: EVENTS }, (_, i) => i + 1);
    // Published before the first worker reads: its first batch holds all of them.
    const published = await world.publish(seqs.map((seq) => ({ event: E2E_EVENT, key: `key-${seq % 3}`, data: { seq } })));
    const victim = await world.fleet.spawn(world.worker({ name: 'victim', consumer, batch: { maxSize: 50 }, gateSeqs: [EVENTS] }));
    await waitFor(
      () => victim.started().length === EVENTS,
      () => `the victim holding the batch: ${victim.describe()}`,
    );
    victim.signal('SIGKILL');
    await victim.exited;
    expect(victim.handled()).toEqual([]);
    expect(await world.redis.get(world.offsetKey(0))).not.toBe(published[EVENTS - 1].offset);

    const survivor = await world.fleet.spawn(world.worker({ name: 'survivor', consumer, batch: { maxSize: 50 } }));
    await world.waitForHandled(published.map((p) => p.id));
    await waitFor(async () => (await world.redis.get(world.offsetKey(0))) === published[EVENTS - 1].offset, 'the offset past the batch');
    expect(survivor.handled().map((h) => h.seq)).toEqual(seqs);
    expect(orderViolations(world.fleet.handled)).toEqual([]);
  });
});
