import { waitFor } from '../support/helpers';
import type { Handled, WorkerProcess } from '../support/processes';
import { duplicates, E2eWorld, Flow, handoverOverlaps, keyedEvents, orderViolations } from '../support/e2e-harness';

/**
 * Workers of one group share the partitions: two processes split 8 partitions
 * 4/4, a third one joining makes it 3/3/2, and on this happy path every event
 * is handled exactly once, by the process that holds its partition's lease.
 */
describe('e2e: competing workers of one group', () => {
  const world = new E2eWorld('e2e-compete', 8);
  const consumer = { concurrency: 2, batchSize: 20, lockTtlMs: 3000, heartbeatTtlMs: 3000 };

  beforeAll(() => world.start());
  afterAll(() => world.stop());

  it('two, then three processes split the partitions and handle everything exactly once', async () => {
    const [a, b] = await world.fleet.spawnAll([
      world.worker({ name: 'a', consumer, delayMs: [0, 3] }),
      world.worker({ name: 'b', consumer, delayMs: [0, 3] }),
    ]);
    const twoOwners = await world.waitForSplit([a.workerId, b.workerId], [4, 4]);
    await expectOwnershipAgrees([a, b], twoOwners);

    const first = await world.publish(keyedEvents(40, 10));
    await world.waitForHandled(first.map((p) => p.id));
    expectHandledByOwners(world.fleet.handled, [a, b], twoOwners);

    const c = await world.fleet.spawn(world.worker({ name: 'c', consumer, delayMs: [0, 3] }));
    // ceil(8 / 3) = 3: a and b each hand one back, and c takes those two.
    const threeOwners = await world.waitForSplit([a.workerId, b.workerId, c.workerId], [3, 3, 2]);
    await expectOwnershipAgrees([a, b, c], threeOwners);

    const before = world.fleet.handled.length;
    const second = await world.publish(keyedEvents(40, 10, 11));
    await world.waitForHandled(second.map((p) => p.id));
    const secondHandled = world.fleet.handled.slice(before);
    expectHandledByOwners(secondHandled, [a, b, c], threeOwners);
    for (const w of [a, b, c]) expect(secondHandled.some((h) => h.pid === w.pid)).toBe(true);

    // Exactly once overall: nothing lost, nothing redelivered by the join.
    expect(duplicates(world.fleet.handled)).toEqual([]);
    expect(world.fleet.handled).toHaveLength(first.length + second.length);
  });
});

/**
 * The same join while events flow. With concurrency 1 a hand-back commits
 * exactly what was done, so even then nothing is lost or redelivered, and a
 * partition's new owner starts only after the old one finished.
 */
describe('e2e: a worker joining while events flow', () => {
  const world = new E2eWorld('e2e-join', 8);
  const consumer = { concurrency: 1, batchSize: 10, lockTtlMs: 3000, heartbeatTtlMs: 3000 };

  beforeAll(() => world.start());
  afterAll(() => world.stop());

  it('moves partitions to the newcomer without loss, redelivery or overlap', async () => {
    const [a, b] = await world.fleet.spawnAll([
      world.worker({ name: 'a', consumer, delayMs: [1, 3] }),
      world.worker({ name: 'b', consumer, delayMs: [1, 3] }),
    ]);
    await world.waitForSplit([a.workerId, b.workerId], [4, 4]);
    const flow = new Flow(world, 16, 10);
    await waitFor(() => world.fleet.handled.length >= 100, 'events flowing through a and b');

    const c = await world.fleet.spawn(world.worker({ name: 'c', consumer, delayMs: [1, 3] }));
    await world.waitForSplit([a.workerId, b.workerId, c.workerId], [3, 3, 2]);
    const joined = world.fleet.handled.length;
    await waitFor(() => c.handled().length >= 20, 'c handling events');
    const published = await flow.stop();
    await world.waitForHandled(published.map((p) => p.id));

    expect(world.fleet.handled.length).toBeGreaterThan(joined);
    expect(duplicates(world.fleet.handled)).toEqual([]);
    expect(world.fleet.handled).toHaveLength(published.length);
    expect(orderViolations(world.fleet.handled)).toEqual([]);
    expect(handoverOverlaps(world.fleet.handled)).toEqual([]);
  });
});

/**
 * What each process says it works matches the leases in Redis; as those cover
 * every partition once, the processes' partitions are disjoint and complete.
 */
async function expectOwnershipAgrees(workers: WorkerProcess[], owners: Array<string | null>): Promise<void> {
  const expected = JSON.stringify(workers.map((w) => owners.flatMap((o, p) => (o === w.workerId ? [p] : []))));
  let claimed = '';
  // Polled: a lease is in Redis a moment before its taker has read the reply.
  await waitFor(
    async () => (claimed = JSON.stringify(await Promise.all(workers.map((w) => w.ownership())))) === expected,
    () => `workers to claim ${expected} as the leases say, they claim ${claimed}`,
    5000,
  );
}

function expectHandledByOwners(handled: readonly Handled[], workers: WorkerProcess[], owners: Array<string | null>): void {
  const pidOfPartition = owners.map((o) => workers.find((w) => w.workerId === o)?.pid);
  const strays = handled.filter((h) => pidOfPartition[h.partition] !== h.pid);
  expect(strays).toEqual([]);
}
