import { killQuietly } from '../support/child-processes';
import { waitFor } from '../support/helpers';
import { GROUP, stopWorker, useRollingDeploy, V1, V2, type Worker } from './support/rolling-deploy.harness';

/**
 * The workers' heartbeat TTL: a gone member's types stay wanted for 3 of them, which must outlast a
 * worker's restart (spawn and Nest boot, several seconds on a loaded host) for these tests to be about
 * the hold rather than about the host's speed.
 */
const HEARTBEAT_TTL_MS = 4_000;

describe('a rolling deploy: a member gone without leaving keeps its types wanted for a while', () => {
  const { redis, prefix, keys, spawn, publish, caughtUp, handled } = useRollingDeploy(HEARTBEAT_TTL_MS);

  /** Publishes while `worker` is down (killed or frozen), so v1 alone could take the partitions and commit past its refunds. */
  async function whileDown(batch: string, worker: Worker, signal: 'SIGKILL' | 'SIGSTOP'): Promise<string[]> {
    killQuietly(worker.child.pid, signal);
    const { refunds } = await publish(batch, 10);
    // Past the heartbeat TTL: the member has expired and the others noticed.
    const members = keys().members(GROUP);
    await waitFor(async () => (await redis.zscore(members, ids.get(worker)!)) === null, `${batch}: member expired`, 4 * HEARTBEAT_TTL_MS);
    return refunds;
  }

  /** Worker ids, as each worker reported when ready. */
  const ids = new Map<Worker, string>();

  async function start(events: string[]): Promise<Worker> {
    const worker = spawn(events);
    const id = new Promise<string>((resolve) => worker.child.once('message', (m: { workerId: string }) => resolve(m.workerId)));
    await worker.ready;
    ids.set(worker, await id);
    return worker;
  }

  it('a v2 SIGKILLed three times and restarted: v1 waits, and every refund published meanwhile is handled', async () => {
    await start(V1);
    let v2 = await start(V2);
    const refunds: string[] = [];
    for (let life = 0; life < 3; life++) {
      refunds.push(...(await whileDown(`life${life}`, v2, 'SIGKILL')));
      v2 = await start(V2);
    }
    await caughtUp('after three crashes');
    expect(new Set(await handled('refund.issued'))).toEqual(new Set(refunds));
  });

  it('a v2 frozen past its heartbeat TTL and thawed: v1 waits, and every refund published meanwhile is handled', async () => {
    await start(V1);
    const v2 = await start(V2);
    const refunds = await whileDown('frozen', v2, 'SIGSTOP');
    killQuietly(v2.child.pid, 'SIGCONT');
    await caughtUp('after the thaw');
    expect(new Set(await handled('refund.issued'))).toEqual(new Set(refunds));
  });

  it('the only v2 stopped gracefully (a rollback): its types go at once and v1 passes over its refunds', async () => {
    const v1 = await start(V1);
    const v2 = await start(V2);
    await stopWorker(v2, 'SIGTERM');
    const { orders } = await publish('rollback', 10);
    await caughtUp('v1 alone after the rollback');
    expect(await redis.lrange(`${prefix()}:test:by:${v1.child.pid}`, 0, -1)).toEqual(expect.arrayContaining(orders));
    expect(await handled('refund.issued')).toEqual([]);
  });
});
