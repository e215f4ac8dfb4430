import { setTimeout as sleep } from 'node:timers/promises';
import { EventrailKeys } from '../../lib/log/keys';
import type { LatencyConsumerConfig } from '../processes/latency-consumer';
import type { LatencyProducerConfig } from '../processes/latency-producer';
import { BenchChild } from '../support/children';
import { Countdown } from '../support/countdown';
import { createLatencyConsumer, LatencyConsumer, LatencySystem } from '../support/latency-consumers';
import { hostNow } from '../support/payload';
import { Measurement, MetricSpec, RunContext, Scenario, Size } from '../support/scenario';
import { percentile } from '../support/stats';

const RATE_PER_SECOND = 2000;
/** Time for a consumer's blocking read to be in place before the producer starts. */
const SETTLE_MS = 200;
/**
 * Sent at the same rate before the measured events and not counted: the first
 * second or two of a fresh process is the JIT compiling the paths (measured:
 * half the events over 0.8 ms in a 10 s round came in the first second, for
 * every system), which a service that runs for hours does not see.
 */
const WARMUP_MS = 2_000;

const ms = (key: string): MetricSpec => ({ key, unit: 'ms', digits: 2 });
/** CPU time (user + system) of the consumer or producer process per 1000 events, warm-up included. */
const cpu = (key: string): MetricSpec => ({ key, unit: 'CPU ms / 1000 events', digits: 1 });

/** Latency: a producer process at 2000 events/s; publish call to handler start, in the consumer process. */
export function latency(size: Size): Scenario {
  const durationMs = size === 'quick' ? 500 : 10_000;
  const events = Math.round((RATE_PER_SECOND * durationMs) / 1000);
  const variant = (id: LatencyProducerConfig['system'], label: string): Scenario['variants'][number] => ({
    id,
    label,
    events,
    run: (ctx) => measure(ctx, id, durationMs),
  });
  return {
    id: 'latency',
    title: `Latency at ${RATE_PER_SECOND} events/s`,
    metrics: [ms('p50'), ms('p99'), ms('max'), cpu('consumerCpu'), cpu('producerCpu')],
    rounds: size === 'quick' ? 1 : 3,
    warmup: false,
    variants: [
      variant('eventrail', 'eventrail, defaults'),
      variant('raw', 'raw `XREAD BLOCK` loop'),
      variant('bullmq', 'BullMQ Worker, concurrency 1'),
      {
        id: 'er-to-raw',
        label: 'eventrail publish, raw XREAD BLOCK loop',
        events,
        run: (ctx) => measure(ctx, 'eventrail', durationMs, 'raw'),
      },
      { id: 'raw-to-er', label: 'raw XADD, eventrail consumer', events, run: (ctx) => measure(ctx, 'raw', durationMs, 'eventrail') },
    ],
    targets: [
      { label: 'latency p50 (ms)', variant: 'eventrail', metric: 'p50' },
      {
        label: 'latency p50 - raw XREAD BLOCK p50 (ms)',
        variant: 'eventrail',
        reference: 'raw',
        metric: 'p50',
        difference: true,
        atMost: 0.1,
      },
      { label: 'latency p99 (ms)', variant: 'eventrail', metric: 'p99' },
      {
        label: 'latency p99 / raw XREAD BLOCK p99 (host noise shows in both)',
        variant: 'eventrail',
        reference: 'raw',
        metric: 'p99',
        atMost: 1.3,
      },
      { label: 'latency max / raw XREAD BLOCK max', variant: 'eventrail', reference: 'raw', metric: 'max' },
    ],
  };
}

/**
 * One round: the producer and the consumer each in a process of their own, as
 * apps run them, so neither system's consumer inherits the heap (and the
 * garbage-collector state) of the benchmark's process or of the system
 * measured before it. The consumer reports the percentiles itself.
 * `inProcess` runs the consumer in this process instead (the profiling tools
 * in bench/tools do, to sample its allocations).
 */
export async function measure(
  ctx: RunContext,
  system: LatencySystem,
  durationMs: number,
  consumerSystem = system,
  inProcess = false,
): Promise<Measurement> {
  // A raw producer may feed eventrail's consumer, and eventrail's publisher a raw consumer: both use partition 0's stream then.
  const mixed = system !== consumerSystem;
  const stream = mixed ? new EventrailKeys(ctx.prefix, 1).stream(0) : `${ctx.prefix}:stream`;
  const warmupMs = durationMs >= 5_000 ? WARMUP_MS : 0;
  const warmup = Math.round((RATE_PER_SECOND * warmupMs) / 1000);
  const config: LatencyProducerConfig = {
    url: ctx.url,
    prefix: ctx.prefix,
    system,
    stream,
    ratePerSecond: RATE_PER_SECOND,
    durationMs: warmupMs + durationMs,
  };
  const expected = Math.round((RATE_PER_SECOND * durationMs) / 1000);
  const producer = new BenchChild('latency-producer', config);
  const consumerConfig: LatencyConsumerConfig = { url: ctx.url, prefix: ctx.prefix, system: consumerSystem, stream, warmup, expected };
  const consumer = inProcess ? undefined : new BenchChild('latency-consumer', consumerConfig);
  let local: LatencyConsumer | undefined;
  try {
    if (consumer) {
      await Promise.all([producer.next('ready', 60_000), consumer.next('ready', 60_000)]);
      const result = consumer.next('latency', warmupMs + durationMs + 60_000);
      await sleep(SETTLE_MS);
      producer.send({ type: 'start' });
      const done = await producer.next('done', warmupMs + durationMs + 30_000);
      const { p50, p99, max, count, cpuMs } = await result;
      const perThousand = (cpu = 0): number => (cpu * 1000) / (warmup + count);
      const metrics = { p50, p99, max, consumerCpu: perThousand(cpuMs), producerCpu: perThousand(done.cpuMs) };
      return { metrics, expected: done.sent - warmup, done: count };
    }
    await producer.next('ready', 60_000);
    const samples: number[] = [];
    const countdown = new Countdown(expected);
    let skipped = 0;
    local = await createLatencyConsumer(ctx.url, ctx.prefix, consumerSystem, stream, (payload) => {
      if (skipped < warmup) {
        skipped++;
        return;
      }
      samples.push(hostNow() - payload.sentAt);
      countdown.hit();
    });
    await local.start();
    await sleep(SETTLE_MS);
    producer.send({ type: 'start' });
    const { sent } = await producer.next('done', warmupMs + durationMs + 30_000);
    await countdown.wait(30_000, `${system} latency consumer`);
    const metrics = { p50: percentile(samples, 50), p99: percentile(samples, 99), max: percentile(samples, 100) };
    return { metrics, expected: sent - warmup, done: countdown.count };
  } finally {
    await Promise.all([consumer?.stop(), local?.close()]);
    await producer.stop();
  }
}
