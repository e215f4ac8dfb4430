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

/**
 * The workers' heartbeat TTL: a gone member's types stay wanted for 3 of them, which must outlast a
 * worker's restart (spawn and Nest boot, several seconds on a loaded host) for these tests to be about
 * the hold rather than about the host's speed.
 */
const HEARTBEAT_TTL_MS = 4_000;

/** A worker process of one version: its group handles `events`. */
function startWorker(prefix: string, events: string[]): Worker {
  const child = spawnTypeScript('test/consumer/support/versioned-worker.ts', {
    env: {
      VERSIONED_PREFIX: prefix,
      VERSIONED_REDIS_URL: testRedisUrl(),
      VERSIONED_GROUP: GROUP,
      VERSIONED_PARTITIONS: String(PARTITIONS),
      VERSIONED_EVENTS: events.join(','),
      VERSIONED_HEARTBEAT_TTL_MS: String(HEARTBEAT_TTL_MS),
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

describe('a rolling deploy: a member gone without leaving keeps its types wanted for a while', () => {
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

  /** Publishes while `worker` is down (killed or frozen), so v1 alone could take the partitions and commit past its refunds. */
  async function whileDown(batch: string, worker: Worker, signal: 'SIGKILL' | 'SIGSTOP'): Promise<string[]> {
    killQuietly(worker.child.pid, signal);
    const { refunds } = await publish(batch, 10);
    // Past the heartbeat TTL: the member has expired and the others noticed.
    const members = keys.members(GROUP);
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
    expect(await redis.lrange(`${prefix}:test:by:${v1.child.pid}`, 0, -1)).toEqual(expect.arrayContaining(orders));
    expect(await handled('refund.issued')).toEqual([]);
  });
});
