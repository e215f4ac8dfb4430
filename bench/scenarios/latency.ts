import { setTimeout as sleep } from 'node:timers/promises';
import { EventrailKeys } from '../../lib/redis/keys';
import type { LatencyConsumerConfig } from '../processes/latency-consumer';
import type { LatencyProducerConfig } from '../processes/latency-producer';
import { BenchChild } from '../support/children';
import { Countdown } from '../support/countdown';
import { createLatencyConsumer, LatencyConsumer, LatencySystem } from '../support/latency-consumers';
import { hostNow } from '../support/payload';
import { Measurement, MetricSpec, RunContext, Scenario, Size } from '../support/scenario';
import { percentile } from '../support/stats';

/**
 * The targets are judged at 2000 events/s. BENCH_LATENCY_RATE runs the scenario at another rate, to see
 * latency nearer a consumer's capacity (each round sends 10 s of it).
 */
const RATE_PER_SECOND = latencyRate(process.env.BENCH_LATENCY_RATE);

function latencyRate(value: string | undefined): number {
  if (value === undefined || value === '') return 2000;
  const rate = Number(value);
  if (!Number.isInteger(rate) || rate < 1 || rate > 200_000)
    throw new Error(`BENCH_LATENCY_RATE must be a whole number of events/s from 1 to 200000, got ${JSON.stringify(value)}`);
  return rate;
}
/** Time for a consumer's blocking read to be in place before the producer starts. */
const SETTLE_MS = 200;
/**
 * Sent at the same rate before the measured events and not counted: the first
 * second or two of a fresh process is the JIT compiling the paths (measured:
 * half the events over 0.8 ms in a 10 s round came in the first second, for
 * every system), which a service that runs for hours does not see.
 */
const WARMUP_MS = 2_000;
/**
 * The interleaved rounds' turns: eventrail and the raw loop take turns of this
 * length, in the order A B B A A B B A ..., until each has had `durationMs`.
 */
const TURN_MS = 1_000;

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
    rounds: size === 'quick' ? 1 : 7,
    warmup: false,
    sharedCore: true,
    variants: [
      variant('eventrail', 'eventrail, defaults'),
      variant('raw', 'raw `XREAD BLOCK` loop'),
      ...interleavedVariants(events, durationMs),
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
        label: 'latency p50 - raw XREAD BLOCK p50 (ms), one after the other',
        variant: 'eventrail',
        reference: 'raw',
        metric: 'p50',
        difference: true,
      },
      { label: 'latency p99 (ms)', variant: 'eventrail', metric: 'p99' },
      { label: 'latency p99 / raw XREAD BLOCK p99, one after the other', variant: 'eventrail', reference: 'raw', metric: 'p99' },
      { label: 'latency max / raw XREAD BLOCK max, one after the other', variant: 'eventrail', reference: 'raw', metric: 'max' },
      {
        label: 'latency p50 / raw XREAD BLOCK p50, interleaved',
        variant: 'eventrail-interleaved',
        reference: 'raw-interleaved',
        metric: 'p50',
        atMost: 1.15,
      },
      {
        label: 'latency p50 - raw XREAD BLOCK p50 (ms), interleaved',
        variant: 'eventrail-interleaved',
        reference: 'raw-interleaved',
        metric: 'p50',
        difference: true,
      },
      {
        label: 'latency p99 / raw XREAD BLOCK p99, interleaved, rounds where the raw p99 is within 3x its quietest',
        variant: 'eventrail-interleaved',
        reference: 'raw-interleaved',
        metric: 'p99',
        atMost: 1.3,
        quietFactor: 3,
      },
      {
        label: 'latency max / raw XREAD BLOCK max, interleaved',
        variant: 'eventrail-interleaved',
        reference: 'raw-interleaved',
        metric: 'max',
      },
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

/**
 * eventrail and the raw loop measured in the same stretch of time: one run
 * starts both pairs of processes (each system's producer and consumer), warms
 * both up, then gives them turns of `TURN_MS` (A B B A ...) and reports each
 * system's percentiles over all of its turns. Run one after the other, a
 * round's two measurements fall in different phases of a shared host, whose
 * own p99 moved 0.3-6.5 ms from one 10 s stretch to the next (the raw loop's,
 * docs/performance.md); taking turns a second at a time, both see the same
 * phases. A system waits while the other has its turn: its consumer blocks in
 * XREAD, eventrail's renews its lease now and then. The first events after a
 * wait were checked for a tail of their own (LATENCY_DUMP): they had none.
 *
 * The two variants share one run a round: the first of them to run measures
 * both and keeps the other's result for it (with `--variants` naming only one,
 * each of its runs measures both again).
 */
function interleavedVariants(events: number, durationMs: number): Scenario['variants'] {
  const kept = new Map<LatencySystem, Measurement>();
  const take = async (ctx: RunContext, system: 'eventrail' | 'raw'): Promise<Measurement> => {
    const mine = kept.get(system);
    kept.delete(system);
    if (mine) return mine;
    const both = await measureInterleaved(ctx, durationMs);
    kept.set(system === 'eventrail' ? 'raw' : 'eventrail', both[system === 'eventrail' ? 1 : 0]);
    return both[system === 'eventrail' ? 0 : 1];
  };
  return [
    { id: 'eventrail-interleaved', label: 'eventrail, turns with the raw loop', events, run: (ctx) => take(ctx, 'eventrail') },
    { id: 'raw-interleaved', label: 'raw `XREAD BLOCK` loop, turns with eventrail', events, run: (ctx) => take(ctx, 'raw') },
  ];
}

interface Pair {
  producer: BenchChild;
  consumer: BenchChild;
  /** Events sent so far, warm-up included. */
  sent: number;
  producerCpuMs: number;
}

/** One interleaved round: eventrail's measurement, then the raw loop's. */
async function measureInterleaved(ctx: RunContext, durationMs: number): Promise<[Measurement, Measurement]> {
  const turns = Math.max(1, Math.round(durationMs / TURN_MS));
  const perTurn = Math.round((RATE_PER_SECOND * Math.min(durationMs, TURN_MS)) / 1000);
  const expected = turns * perTurn;
  const warmup = durationMs >= 5_000 ? Math.round((RATE_PER_SECOND * WARMUP_MS) / 1000) : 0;
  const systems = ['eventrail', 'raw'] as const;
  const pairs: Pair[] = systems.map((system) => {
    // One prefix for both (the run's keys are deleted afterwards): the raw loop's stream is no key of eventrail's.
    const { prefix } = ctx;
    const stream = `${prefix}:stream`;
    const producer: LatencyProducerConfig = { url: ctx.url, prefix, system, stream, ratePerSecond: RATE_PER_SECOND, durationMs: 0 };
    const consumer: LatencyConsumerConfig = { url: ctx.url, prefix, system, stream, warmup, expected };
    return {
      producer: new BenchChild('latency-producer', producer),
      consumer: new BenchChild('latency-consumer', consumer),
      sent: 0,
      producerCpuMs: 0,
    };
  });
  const turn = async (pair: Pair, events: number): Promise<void> => {
    if (events === 0) return;
    pair.sent += events;
    pair.producer.send({ type: 'send', events });
    const done = await pair.producer.next('done', events + 30_000);
    pair.producerCpuMs += done.cpuMs ?? 0;
    pair.consumer.send({ type: 'await', handled: pair.sent });
    await pair.consumer.next('progress', 30_000);
  };
  try {
    await Promise.all(pairs.flatMap((p) => [p.producer.next('ready', 60_000), p.consumer.next('ready', 60_000)]));
    const results = pairs.map((p) => p.consumer.next('latency', 2 * (warmup + expected) + 120_000));
    await sleep(SETTLE_MS);
    for (const pair of pairs) await turn(pair, warmup);
    for (let i = 0; i < 2 * turns; i++) await turn(pairs[[0, 1, 1, 0][i % 4]], perTurn);
    const reports = await Promise.all(results);
    return [0, 1].map((i): Measurement => {
      const { p50, p99, max, count, cpuMs } = reports[i];
      const perThousand = (cpu = 0): number => (cpu * 1000) / (warmup + count);
      const metrics = { p50, p99, max, consumerCpu: perThousand(cpuMs), producerCpu: perThousand(pairs[i].producerCpuMs) };
      return { metrics, expected, done: count };
    }) as [Measurement, Measurement];
  } finally {
    await Promise.all(pairs.flatMap((p) => [p.consumer.stop(), p.producer.stop()]));
  }
}
