import { hostname } from 'node:os';
import { waitFor } from '../support/helpers';
import { EventrailPublisher, partitionForKey } from '../../lib';
import { GROUP, PARTITIONS, stopWorker, useRollingDeploy, V1, V2 } from './support/rolling-deploy.harness';

describe('a rolling deploy: members of one group with different handler sets', () => {
  const { redis, prefix, keys, app, spawn, publish, caughtUp, handled } = useRollingDeploy();

  it('handles all 40 refund.issued events while a v1 worker without that handler runs next to a v2 worker with it', async () => {
    const [v1, v2] = [spawn(V1), spawn(V2)];
    await Promise.all([v1.ready, v2.ready]);
    const { refunds, orders } = await publish('a', 40);
    await caughtUp('after 40 refunds and 40 orders');
    expect(new Set(await handled('refund.issued'))).toEqual(new Set(refunds));
    expect(new Set(await handled('order.placed'))).toEqual(new Set(orders));
    // The worker that lacks the handler says so.
    await waitFor(
      () => v1.output.some((line) => line.includes('refund.issued')),
      () => `v1 warns about refund.issued:\n${v1.output.join('\n')}`,
    );
  });

  it('as members join and leave: what a live member wants is handled; once the last one that wants it is gone, the rest go on', async () => {
    const v1 = spawn(V1);
    await v1.ready;
    // v1 alone: nobody wants refunds, and v1 works every partition.
    const alone = await publish('alone', 12);
    await caughtUp('v1 alone');
    expect(new Set(await handled('order.placed'))).toEqual(new Set(alone.orders));

    // v2 joins: from now on refunds are wanted by a live member.
    const v2 = spawn(V2);
    await v2.ready;
    const both = await publish('both', 20);
    await caughtUp('v1 and v2');
    expect(await handled('refund.issued')).toEqual(expect.arrayContaining(both.refunds));
    expect(await handled('order.placed')).toEqual(expect.arrayContaining(both.orders));

    // A second v2 joins, then the first v2 is killed: the second carries on, v1 still works nothing.
    const v2b = spawn(V2);
    await v2b.ready;
    await stopWorker(v2, 'SIGKILL');
    const handover = await publish('handover', 20);
    await caughtUp('v1 and the second v2');
    expect(await handled('refund.issued')).toEqual(expect.arrayContaining(handover.refunds));
    // v1 handled what it had alone; once barred it handles nothing: it may still have handled what it had read
    // before the bar reached it when v2 joined (at least once: v2 handled those too), never the handover's.
    const byV1 = await redis.lrange(`${prefix()}:test:by:${v1.child.pid}`, 0, -1);
    expect(byV1).toEqual(expect.arrayContaining(alone.orders));
    expect(byV1.filter((id) => !alone.orders.includes(id) && !both.orders.includes(id))).toEqual([]);

    // The last v2 leaves (a rollback): refunds are wanted by nobody live, and v1 goes on past them.
    await stopWorker(v2b, 'SIGTERM');
    const after = await publish('after', 12);
    await caughtUp('v1 alone again');
    expect(await handled('order.placed')).toEqual(expect.arrayContaining(after.orders));
  });

  it('a v2 joining while v1 misses the rebalance signal and ticks only every 30 s: v2 bars v1 at once, and no refund is skipped', async () => {
    // v1 learns of v2 only at its next tick; until then only the bar keeps it from committing past refunds.
    const v1 = spawn(V1, { lockTtlMs: 90_000, heartbeatTtlMs: 90_000, deaf: true });
    await v1.ready;
    const before = await publish('before', 8);
    await waitFor(async () => (await handled('order.placed')).length === before.orders.length, 'v1 handled the first orders');
    const v2 = spawn(V2);
    await v2.ready;
    const joined = await publish('joined', 40);
    await caughtUp('v2 joined, v1 deaf');
    expect(new Set(await handled('refund.issued'))).toEqual(expect.objectContaining({ size: 40 }));
    expect(await handled('refund.issued')).toEqual(expect.arrayContaining(joined.refunds));
    expect(await handled('order.placed')).toEqual(expect.arrayContaining(joined.orders));
    expect(v2.output.some((line) => line.includes('back from workers that lack handlers'))).toBe(true);
    // v1 holds no partition while barred (it may have handled what it had read before the bar: at least once).
    const holders = await Promise.all([0, 1, 2, 3].map((p) => redis.get(keys().lease('billing', p))));
    expect(holders.filter((token) => token?.includes(`:${v1.child.pid}:`))).toEqual([]);
  });

  it('a v1 handing partitions back slowly keeps its heartbeat (and its other leases) while it commits, and after v2 joins no refund is skipped', async () => {
    const tuning = {
      lockTtlMs: 3_000,
      heartbeatTtlMs: 2_000,
      consumer: { concurrency: 4, shutdownTimeoutMs: 60_000 },
      holdEvent: 'slow.job',
    };
    const withSlow = [...V1, 'slow.job'];
    await redis.set(`${prefix()}:test:hold`, '1');
    const v1a = spawn(withSlow, tuning);
    const idA = await v1a.ready;
    // Orders keep flowing, so v1a's commits keep the leases of the partitions it keeps alive.
    let flowing = true;
    const flow = (async () => {
      for (let i = 0; flowing; i++) await publish(`flow-${i}`, 1);
    })();
    const v1b = spawn(withSlow, tuning);
    // v1a keeps the half of the partitions its place among the sorted member ids prefers, and hands the other
    // half to v1b: a slow job there makes the hand-back wait. (Until the hand-back stopped holding up the
    // ticks, v1a's heartbeat lapsed behind it while it kept committing the partitions it kept: an attack
    // skipped refunds then, and the leases of a member that is not live are taken back since, aebd53d.)
    const place = [idA, `${hostname()}:${v1b.child.pid}:`].sort().indexOf(idA);
    const kept = [place * 2, place * 2 + 1];
    for (const p of [0, 1, 2, 3].filter((q) => !kept.includes(q))) {
      let key = 'slow-0';
      for (let i = 1; partitionForKey(key, PARTITIONS) !== p; i++) key = `slow-${i}`;
      await app().get(EventrailPublisher).publish('slow.job', {}, { key });
    }
    await v1b.ready;
    await waitFor(() => v1a.output.some((line) => line.includes('handing back partitions')), 'v1a hands partitions back', 60_000);
    // Its heartbeat goes on meanwhile: the expiry in the member set moves forward, and never falls behind Redis's clock.
    const expiry = async (): Promise<{ at: number; live: boolean }> => {
      const [score, [seconds]] = await Promise.all([redis.zscore(keys().members(GROUP), idA), redis.time()]);
      return { at: Number(score ?? 0), live: score !== null && Number(score) >= Number(seconds) * 1000 };
    };
    let seen = await expiry();
    for (let beat = 0; beat < 3; beat++) {
      const from = seen.at;
      await waitFor(async () => {
        seen = await expiry();
        return !seen.live || seen.at > from;
      }, 'v1a’s next heartbeat while it hands partitions back');
      expect(seen.live).toBe(true);
    }
    const v2 = spawn([...withSlow, 'refund.issued'], tuning);
    await v2.ready;
    const joined = await publish('joined', 40);
    flowing = false;
    await flow;
    await redis.del(`${prefix()}:test:hold`);
    await caughtUp('the slow jobs done');
    expect(await handled('refund.issued')).toEqual(expect.arrayContaining(joined.refunds));
    expect(await handled('order.placed')).toEqual(expect.arrayContaining(joined.orders));
  });
});
