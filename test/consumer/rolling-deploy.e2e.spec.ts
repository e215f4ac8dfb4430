import { waitFor } from '../support/helpers';
import { stopWorker, useRollingDeploy, V1, V2 } from './support/rolling-deploy.harness';

describe('a rolling deploy: members of one group with different handler sets', () => {
  const { redis, prefix, spawn, publish, caughtUp, handled } = useRollingDeploy();

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
    expect(await redis.lrange(`${prefix()}:test:by:${v1.child.pid}`, 0, -1)).toEqual(expect.arrayContaining(alone.orders));
    expect(await redis.llen(`${prefix()}:test:by:${v1.child.pid}`)).toBe(alone.orders.length);

    // The last v2 leaves (a rollback): refunds are wanted by nobody live, and v1 goes on past them.
    await stopWorker(v2b, 'SIGTERM');
    const after = await publish('after', 12);
    await caughtUp('v1 alone again');
    expect(await handled('order.placed')).toEqual(expect.arrayContaining(after.orders));
  });
});
