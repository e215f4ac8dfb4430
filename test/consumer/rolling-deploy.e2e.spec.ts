import Redis from 'ioredis';
import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { EventrailPublisher } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { killQuietly, spawnTypeScript } from '../support/child-processes';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import type { INestApplicationContext } from '@nestjs/common';

const PARTITIONS = 4;
const GROUP = 'billing';
const V1 = ['order.placed'];
const V2 = ['order.placed', 'refund.issued'];

interface Worker {
  child: ChildProcess;
  output: string[];
  ready: Promise<void>;
}

/** A worker process of one version: its group handles `events`. */
function startWorker(prefix: string, events: string[]): Worker {
  const child = spawnTypeScript('test/consumer/support/versioned-worker.ts', {
    env: {
      VERSIONED_PREFIX: prefix,
      VERSIONED_REDIS_URL: testRedisUrl(),
      VERSIONED_GROUP: GROUP,
      VERSIONED_PARTITIONS: String(PARTITIONS),
      VERSIONED_EVENTS: events.join(','),
    },
  });
  const output: string[] = [];
  for (const stream of [child.stdout, child.stderr]) if (stream) createInterface({ input: stream }).on('line', (line) => output.push(line));
  const ready = new Promise<void>((resolve, reject) => {
    child.once('message', () => resolve());
    child.once('exit', (code, signal) => reject(new Error(`worker exited before ready (${code ?? signal}): ${output.join('\n')}`)));
  });
  return { child, output, ready };
}

/** Stops a worker by pid and waits for its exit. */
async function stopWorker(worker: Worker, signal: NodeJS.Signals): Promise<void> {
  if (worker.child.exitCode !== null || worker.child.signalCode !== null) return;
  const exited = new Promise((resolve) => worker.child.once('exit', resolve));
  killQuietly(worker.child.pid, signal);
  await exited;
}

describe('a rolling deploy: members of one group with different handler sets', () => {
  const redis = new Redis(testRedisUrl());
  const workers: Worker[] = [];
  let prefix: string;
  let keys: EventrailKeys;
  let app: INestApplicationContext;
  let publisher: EventrailPublisher;

  beforeEach(async () => {
    prefix = uniquePrefix('rolling');
    keys = new EventrailKeys(prefix, PARTITIONS);
    // A publishing app only (no handlers, so no group of its own).
    app = await createApp({ prefix, partitions: PARTITIONS });
    publisher = app.get(EventrailPublisher);
  });

  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => stopWorker(w, 'SIGKILL')));
    await app.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.quit());

  function spawn(events: string[]): Worker {
    const worker = startWorker(prefix, events);
    workers.push(worker);
    return worker;
  }

  async function publish(batch: string, count: number): Promise<{ refunds: string[]; orders: string[] }> {
    const refunds: string[] = [];
    const orders: string[] = [];
    for (let i = 0; i < count; i++) {
      // Keys spread the events over every partition.
      refunds.push((await publisher.publish('refund.issued', { i }, { key: `${batch}-refund-${i}` })).id);
      orders.push((await publisher.publish('order.placed', { i }, { key: `${batch}-order-${i}` })).id);
    }
    return { refunds, orders };
  }

  /** Resolves once the group's committed offset reached the last entry of every partition. */
  async function caughtUp(what: string): Promise<void> {
    await waitFor(
      async () => {
        for (let p = 0; p < PARTITIONS; p++) {
          const [last] = await redis.xrevrange(keys.stream(p), '+', '-', 'COUNT', 1);
          if (!last) continue;
          const committed = await redis.get(keys.offset(GROUP, p));
          if (committed !== last[0]) return false;
        }
        return true;
      },
      `group "${GROUP}" caught up (${what})`,
      30_000,
    );
  }

  const handled = (event: string): Promise<string[]> => redis.lrange(`${prefix}:test:handled:${event}`, 0, -1);

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
    expect(await redis.lrange(`${prefix}:test:by:${v1.child.pid}`, 0, -1)).toEqual(expect.arrayContaining(alone.orders));
    expect(await redis.llen(`${prefix}:test:by:${v1.child.pid}`)).toBe(alone.orders.length);

    // The last v2 leaves (a rollback): refunds are wanted by nobody live, and v1 goes on past them.
    await stopWorker(v2b, 'SIGTERM');
    const after = await publish('after', 12);
    await caughtUp('v1 alone again');
    expect(await handled('order.placed')).toEqual(expect.arrayContaining(after.orders));
  });
});
