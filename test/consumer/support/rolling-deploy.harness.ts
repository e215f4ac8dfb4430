import Redis from 'ioredis';
import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { EventrailPublisher } from '../../../lib';
import { EventrailKeys } from '../../../lib/redis/keys';
import { createApp } from '../../support/app';
import { killQuietly, spawnTypeScript } from '../../support/child-processes';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../../support/helpers';
import type { INestApplicationContext } from '@nestjs/common';

export const PARTITIONS = 4;
export const GROUP = 'billing';
export const V1 = ['order.placed'];
export const V2 = ['order.placed', 'refund.issued'];

export interface Worker {
  child: ChildProcess;
  output: string[];
  /** Resolves with its worker id once its group runs. */
  ready: Promise<string>;
}

/** How one worker differs from the others (see versioned-worker.ts). */
export interface WorkerTuning {
  lockTtlMs?: number;
  heartbeatTtlMs?: number;
  /** Ignores the rebalance signal: learns of other members only at its ticks. */
  deaf?: boolean;
  /** More consumer options. */
  consumer?: Record<string, unknown>;
  /** Its handler of this event waits while `<prefix>:test:hold` exists. */
  holdEvent?: string;
}

/** A worker process of one version: its group handles `events`. */
function startWorker(prefix: string, events: string[], { lockTtlMs, heartbeatTtlMs, deaf, consumer, holdEvent }: WorkerTuning): Worker {
  const child = spawnTypeScript('test/consumer/support/versioned-worker.ts', {
    env: {
      VERSIONED_PREFIX: prefix,
      VERSIONED_REDIS_URL: testRedisUrl(),
      VERSIONED_GROUP: GROUP,
      VERSIONED_PARTITIONS: String(PARTITIONS),
      VERSIONED_EVENTS: events.join(','),
      ...(heartbeatTtlMs === undefined ? {} : { VERSIONED_HEARTBEAT_TTL_MS: String(heartbeatTtlMs) }),
      ...(lockTtlMs === undefined ? {} : { VERSIONED_LOCK_TTL_MS: String(lockTtlMs) }),
      ...(deaf ? { VERSIONED_DEAF: '1' } : {}),
      ...(consumer ? { VERSIONED_CONSUMER: JSON.stringify(consumer) } : {}),
      ...(holdEvent ? { VERSIONED_HOLD_EVENT: holdEvent } : {}),
    },
  });
  const output: string[] = [];
  for (const stream of [child.stdout, child.stderr]) if (stream) createInterface({ input: stream }).on('line', (line) => output.push(line));
  const ready = new Promise<string>((resolve, reject) => {
    child.once('message', (message: { workerId: string }) => resolve(message.workerId));
    child.once('exit', (code, signal) => reject(new Error(`worker exited before ready (${code ?? signal}): ${output.join('\n')}`)));
  });
  return { child, output, ready };
}

/** Stops a worker by pid and waits for its exit. */
export async function stopWorker(worker: Worker, signal: NodeJS.Signals): Promise<void> {
  if (worker.child.exitCode !== null || worker.child.signalCode !== null) return;
  const exited = new Promise((resolve) => worker.child.once('exit', resolve));
  killQuietly(worker.child.pid, signal);
  await exited;
}

/**
 * Worker processes of several versions of one group, a publishing app, and what each handled (recorded in
 * Redis by the workers). Registers its hooks in the calling describe block.
 */
export function useRollingDeploy(heartbeatTtlMs?: number) {
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

  function spawn(events: string[], tuning: WorkerTuning = {}): Worker {
    const worker = startWorker(prefix, events, { heartbeatTtlMs, ...tuning });
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

  return {
    redis,
    prefix: (): string => prefix,
    keys: (): EventrailKeys => keys,
    app: (): INestApplicationContext => app,
    spawn,
    publish,
    caughtUp,
    handled,
  };
}
