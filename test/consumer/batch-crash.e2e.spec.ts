import { waitFor } from '../support/helpers';
import { E2E_EVENT } from '../support/processes';
import { E2eWorld, orderViolations } from '../support/e2e-harness';

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

/**
 * A message that kills its worker whenever a batch holding it is handled.
 * The first worker dies on the whole batch (the happy path counts nothing);
 * each worker after it takes the partition over from a dead owner, so it
 * handles one-message batches, counting each delivery, and the poison's
 * count grows until it is dead-lettered unhandled.
 */
describe('e2e: a poison message in a batch that crashes its worker every time', () => {
  const world = new E2eWorld('e2e-batch-poison', 1);
  const MAX_DELIVERIES = 3;

  beforeAll(() => world.start());
  afterAll(() => world.stop());

  it('is dead-lettered with max-deliveries after a bounded number of crashes; the rest are handled', async () => {
    const consumer = { lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: LOCK_TTL_MS, maxDeliveries: MAX_DELIVERIES };
    const published = await world.publish([1, 2, 3, 4, 5].map((seq) => ({ event: E2E_EVENT, key: 'account-1', data: { seq } })));
    const config = world.worker({ name: 'worker', consumer, batch: { maxSize: 50 }, killSeqs: [3] });
    const done = world.waitForHandled([published[4].id], 120_000).then(() => 'done' as const);
    let crashes = 0;
    // Every worker but the last dies on the poison (maybe before it reports ready); the last dead-letters it and handles the rest.
    for (;;) {
      const crashed = world.fleet.spawn(config).then(
        (worker) => worker.exited.then(() => 'crashed' as const),
        () => 'crashed' as const,
      );
      if ((await Promise.race([crashed, done])) === 'done') break;
      crashes++;
      expect(crashes).toBeLessThanOrEqual(MAX_DELIVERIES);
    }
    // One crash on the whole batch, then MAX_DELIVERIES - 1 counted ones; the next count reaches the limit.
    expect(crashes).toBe(MAX_DELIVERIES);
    const letters = (await world.redis.xrange(world.keys.deadLetters(world.group), '-', '+')).map(([, fields]) => fields);
    expect(letters).toHaveLength(1);
    expect(letters[0]).toEqual(expect.arrayContaining(['reason', 'max-deliveries']));
    const handledSeqs = [...new Set(world.fleet.handled.map((h) => h.seq))].sort((a, b) => a - b);
    expect(handledSeqs).toEqual([1, 2, 4, 5]);
    expect(orderViolations(world.fleet.handled)).toEqual([]);
  });
});
