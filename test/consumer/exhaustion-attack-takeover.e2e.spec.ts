import { waitFor } from '../support/helpers';
import { E2eWorld, keyedEvents } from '../support/e2e-harness';

const LOCK_TTL_MS = 1500;

/**
 * A live worker's own lapsed lease counts no delivery, but a takeover by
 * another process does, whether the one before crashed or only stalled:
 * attacked with two processes that stall (SIGSTOP by pid) in turn on the
 * same entry.
 */
describe('e2e: stalls that hand an entry from one process to another', () => {
  const world = new E2eWorld('e2e-attack-takeover', 1);

  beforeAll(() => world.start());
  afterAll(() => world.stop());

  it('each takeover from a stalled process counts one delivery, and maxDeliveries is reached', async () => {
    const consumer = {
      concurrency: 1,
      ordering: 'partition' as const,
      lockTtlMs: LOCK_TTL_MS,
      heartbeatTtlMs: LOCK_TTL_MS,
      maxDeliveries: 2,
    };
    await world.publish(keyedEvents(1, 3));
    const first = await world.fleet.spawn(world.worker({ name: 'first', consumer, gateSeqs: [1] }));
    await world.waitForSplit([first.workerId], [1]);
    const second = await world.fleet.spawn(world.worker({ name: 'second', consumer, gateSeqs: [1] }));
    await waitFor(() => first.started().some((s) => s.seq === 1), 'first blocked on seq 1');

    // Stall one: the first process freezes past its lease; the second takes the partition over.
    first.signal('SIGSTOP');
    await world.waitForSplit([second.workerId], [1], LOCK_TTL_MS + 5000);
    await waitFor(
      () => second.started().some((s) => s.seq === 1),
      () => `second blocked on seq 1\n${second.tail()}`,
    );
    // Its handler of seq 1 may finish once it runs again (its result is fenced): queued before the resume.
    first.send({ cmd: 'open' });
    first.signal('SIGCONT');

    // Stall two: now the second freezes; the first, alive again, takes it back from another process.
    second.signal('SIGSTOP');
    await world.waitForSplit([first.workerId], [1], LOCK_TTL_MS + 5000);
    const deadLettered = (): string | undefined => first.output.find((line) => line.includes('max-deliveries'));
    await waitFor(deadLettered, () => `first dead-lettering seq 1 as max-deliveries\n${first.tail()}`);
    second.signal('SIGCONT');
    const runs = [first, second].map((w) => w.started().filter((s) => s.seq === 1).length);
    console.log(`seq 1 started ${runs[0]} time(s) by first, ${runs[1]} by second; ${deadLettered()?.replace(/^.*ERROR /, '')}`);
    // One counted delivery per takeover from another process: the second's, then the first's (maxDeliveries 2).
    expect(deadLettered()).toMatch(/delivered 2 times/);
    expect(runs).toEqual([1, 1]);
  });
});
