import type { PublishResult } from '../../lib';
import { duplicates, E2eWorld, keyedEvents, orderViolations, overlapViolations } from '../support/e2e-harness';

/**
 * Per-key order across two worker processes with concurrency 4: different keys
 * run side by side, the same key never out of order or overlapping.
 */
describe('e2e: per-key ordering across worker processes', () => {
  const world = new E2eWorld('e2e-order', 8);

  beforeAll(() => world.start());
  afterAll(() => world.stop());

  it('handles every event once, each key in publish order', async () => {
    const consumer = { concurrency: 4, batchSize: 50, lockTtlMs: 3000, heartbeatTtlMs: 3000 };
    const [a, b] = await world.fleet.spawnAll([
      world.worker({ name: 'a', consumer, delayMs: [0, 2] }),
      world.worker({ name: 'b', consumer, delayMs: [0, 2] }),
    ]);
    // Publish only once the split is settled: a hand-back during the run may
    // legitimately redeliver (at-least-once), and this test wants exactly once.
    await world.waitForSplit([a.workerId, b.workerId], [4, 4]);

    const keys = 40;
    const perKey = 25;
    const published: PublishResult[] = [];
    // In slices, so publishing and handling interleave.
    for (let from = 1; from <= perKey; from += 5) published.push(...(await world.publish(keyedEvents(keys, 5, from))));
    await world.waitForHandled(published.map((p) => p.id));

    const handled = world.fleet.handled;
    expect(duplicates(handled)).toEqual([]);
    expect(handled).toHaveLength(keys * perKey);
    expect(orderViolations(handled)).toEqual([]);
    expect(overlapViolations(handled)).toEqual([]);
    // Both processes did work, and in-process concurrency really was used.
    expect(a.handled().length).toBeGreaterThan(0);
    expect(b.handled().length).toBeGreaterThan(0);
    expect(maxInFlight(a.handled())).toBeGreaterThan(1);
  });
});

/** Most handler calls of one process running at the same moment. */
function maxInFlight(handled: ReadonlyArray<{ startedAt: number; endedAt: number }>): number {
  const edges = handled.flatMap((h) => [
    { at: h.startedAt, delta: 1 },
    { at: h.endedAt, delta: -1 },
  ]);
  edges.sort((x, y) => x.at - y.at || x.delta - y.delta);
  let current = 0;
  let max = 0;
  for (const e of edges) max = Math.max(max, (current += e.delta));
  return max;
}
