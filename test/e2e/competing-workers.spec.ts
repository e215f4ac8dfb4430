import type { Handled, WorkerProcess } from '../support/processes';
import { duplicates, E2eWorld, keyedEvents } from './harness';

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
    const twoOwners = await world.waitForOwnership([a.workerId, b.workerId], [4, 4]);
    await expectOwnershipAgrees([a, b], twoOwners);

    const first = await world.publish(keyedEvents(40, 10));
    await world.waitForHandled(first.map((p) => p.id));
    expectHandledByOwners(world.fleet.handled, [a, b], twoOwners);

    const c = await world.fleet.spawn(world.worker({ name: 'c', consumer, delayMs: [0, 3] }));
    // ceil(8 / 3) = 3: a and b each hand one back, and c takes those two.
    const threeOwners = await waitForSplit(world, [a, b, c], [3, 3, 2]);
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

/** Waits until the three workers hold `counts` partitions in some order (which one gets 2 is not fixed). */
async function waitForSplit(world: E2eWorld, workers: WorkerProcess[], counts: number[]): Promise<Array<string | null>> {
  const { waitFor } = await import('../support/helpers');
  let owners: Array<string | null> = [];
  await waitFor(
    async () => {
      owners = await world.leaseOwners();
      const held = workers.map((w) => owners.filter((o) => o === w.workerId).length).sort();
      return owners.every((o) => o !== null) && JSON.stringify(held) === JSON.stringify([...counts].sort());
    },
    () => `lease owners ${JSON.stringify(owners)} to split ${JSON.stringify(counts)}`,
    15_000,
  );
  return owners;
}

/** What each process says it works matches the leases in Redis, and no partition is worked twice. */
async function expectOwnershipAgrees(workers: WorkerProcess[], owners: Array<string | null>): Promise<void> {
  const claimed = await Promise.all(workers.map((w) => w.ownership()));
  const all = claimed.flat().sort((x, y) => x - y);
  expect(all).toEqual(owners.map((_, p) => p));
  workers.forEach((w, i) => expect(claimed[i]).toEqual(owners.flatMap((o, p) => (o === w.workerId ? [p] : []))));
}

function expectHandledByOwners(handled: readonly Handled[], workers: WorkerProcess[], owners: Array<string | null>): void {
  const pidOfPartition = owners.map((o) => workers.find((w) => w.workerId === o)?.pid);
  const strays = handled.filter((h) => pidOfPartition[h.partition] !== h.pid);
  expect(strays).toEqual([]);
}
