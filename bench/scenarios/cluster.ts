import { startRedisCluster } from '../../test/support/redis-cluster';
import { Countdown } from '../support/countdown';
import { createEventrailApp, fillLog, startConsumers } from '../support/eventrail-app';
import { MetricSpec, Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { perSecond } from '../support/stats';

const PARTITIONS = 12;
const KEYS = 1000;
const DRAIN_RATE: MetricSpec = { key: 'drain', unit: 'events/s', digits: 0 };

/**
 * The same workload on one Redis and on a local 3-primary Redis Cluster (with
 * 3 replicas): keyed `publishMany` into 12 partitions, then one process
 * draining them (concurrency 12). On 2 cores the cluster's six servers and the
 * client share the same CPUs, so this shows the cost of going through a
 * cluster, not the capacity that more machines would add.
 */
export function cluster(size: Size): Scenario {
  const events = size === 'quick' ? 2_000 : 50_000;
  return {
    id: 'cluster',
    title: 'Redis Cluster (3 primaries) against one Redis, 12 partitions',
    metrics: [RATE, DRAIN_RATE],
    rounds: size === 'quick' ? 1 : 3,
    warmup: false,
    variants: [
      { id: 'single', label: 'eventrail on one Redis', events, run: (ctx) => run(ctx, events, false) },
      { id: 'cluster', label: 'eventrail on a 3-primary cluster', events, run: (ctx) => run(ctx, events, true) },
    ],
    targets: [
      { label: 'cluster / one Redis, publishMany rate', variant: 'cluster', reference: 'single', metric: 'rate' },
      { label: 'cluster / one Redis, drain rate', variant: 'cluster', reference: 'single', metric: 'drain' },
    ],
  };
}

async function run(ctx: RunContext, events: number, onCluster: boolean): Promise<Measurement> {
  // A fresh cluster per run (started before the clock), so runs do not share state.
  const redisCluster = onCluster ? await startRedisCluster(3) : undefined;
  const countdown = new Countdown(events);
  const app = await createEventrailApp({
    url: ctx.url,
    prefix: ctx.prefix,
    partitions: PARTITIONS,
    consumer: { concurrency: PARTITIONS },
    redis: redisCluster ? { cluster: { nodes: redisCluster.startupNodes } } : undefined,
    handler: async () => countdown.hit(),
  });
  try {
    const published = performance.now();
    await fillLog(app, events, KEYS);
    const publishRate = perSecond(events, performance.now() - published);
    const started = performance.now();
    await startConsumers(app);
    await countdown.wait(30_000 + events, onCluster ? 'cluster drain' : 'single-node drain');
    const drainRate = perSecond(countdown.count, countdown.finishedAt - started);
    return { metrics: { rate: publishRate, drain: drainRate }, expected: events, done: countdown.count };
  } finally {
    await app.close();
    await redisCluster?.stop();
  }
}
