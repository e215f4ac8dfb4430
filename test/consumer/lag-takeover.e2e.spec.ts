import { countEntriesAfter } from '../../lib/consumer/coordination/lag';
import { STREAM_START } from '../../lib/wire/stream-id';
import { registerScripts } from '../../lib/redis/scripts';
import { waitFor } from '../support/helpers';
import { E2E_EVENT } from '../support/processes';
import { E2eWorld } from '../support/e2e-harness';

const EVENTS = 3_000;
/** Held by the survivor's gate, one per partition, so its offsets stand still before them. */
const GATED = [2_500, 2_501];

/**
 * The lag position survives a crash: a worker SIGKILLed mid-backlog leaves
 * offsets with their positions (both are written in one script), the
 * survivor takes over after the lease TTL, recovers entry by entry and then
 * in batches, and the O(1) lag stays equal to a full count throughout.
 */
describe('e2e: lag positions across a crash and a takeover', () => {
  const world = new E2eWorld('e2e-lagpos', 2);
  const client = registerScripts(world.redis);

  beforeAll(() => world.start());
  afterAll(() => world.stop());

  /** Per partition: the script's lag (-1: unknown) and a full count, read while the offsets did not move. */
  const lags = async (): Promise<Array<{ fast: number; counted: number }> | undefined> => {
    const offsets = (): Promise<Array<string | null>> => world.redis.mget([0, 1].map((p) => world.offsetKey(p)));
    const before = JSON.stringify(await offsets());
    const read = await Promise.all(
      [0, 1].map(async (p) => {
        const [fast, committed] = await client.eventrailReadLag(
          world.keys.stream(p),
          world.offsetKey(p),
          world.keys.recovery(world.group, p),
        );
        const { lag } = await countEntriesAfter(client, world.keys.stream(p), committed ?? STREAM_START, Number.MAX_SAFE_INTEGER);
        return { fast, counted: lag };
      }),
    );
    return JSON.stringify(await offsets()) === before ? read : undefined;
  };

  it('keeps the lag exact after the survivor takes over from a killed worker', async () => {
    const consumer = { concurrency: 2, batchSize: 20, lockTtlMs: 2000, heartbeatTtlMs: 1000 };
    const published = await world.publish(
      Array.from({ length: EVENTS }, (_, seq) => ({ event: E2E_EVENT, data: { seq }, partition: seq % 2 })),
    );
    const victim = await world.fleet.spawn(world.worker({ name: 'victim', consumer, delayMs: [1, 3] }));
    await waitFor(() => victim.handled().length >= 600, 'victim handling its backlog', 60_000);
    victim.signal('SIGKILL');
    await victim.exited;

    const survivor = await world.fleet.spawn(world.worker({ name: 'survivor', consumer, gateSeqs: GATED }));
    await waitFor(() => GATED.every((seq) => survivor.started().some((s) => s.seq === seq)), 'survivor held at the gates', 60_000);
    let last: unknown;
    const held = await waitFor(
      async () => {
        const read = (last = await lags());
        return read?.every(({ fast, counted }) => fast === counted) ? read : undefined;
      },
      () => `the lag script to agree with a count: ${JSON.stringify(last)}`,
    );
    // Each partition stands just before its gate: well behind, and told by the position, not counted.
    for (const { fast } of held) expect(fast).toBeGreaterThan(200);

    survivor.send({ cmd: 'open' });
    await world.waitForHandled(
      published.map((p) => p.id),
      60_000,
    );
    await waitFor(async () => (await lags())?.every(({ fast, counted }) => fast === 0 && counted === 0), 'both partitions caught up');
  });
});
