import Redis from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventrailKeys } from '../../lib/log/keys';
import type { LatencyProducerConfig } from '../processes/latency-producer';
import { createWorker, runWorker } from '../support/bullmq';
import { BenchChild } from '../support/children';
import { Countdown } from '../support/countdown';
import { createEventrailApp, startConsumers } from '../support/eventrail-app';
import { BenchPayload, hostNow } from '../support/payload';
import { Measurement, MetricSpec, RunContext, Scenario, Size } from '../support/scenario';
import { percentile } from '../support/stats';

const RATE_PER_SECOND = 2000;
/** Time for a consumer's blocking read to be in place before the producer starts. */
const SETTLE_MS = 200;

type XReadReply = Array<[string, Array<[string, string[]]>]> | null;

const ms = (key: string): MetricSpec => ({ key, unit: 'ms', digits: 2 });

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
    metrics: [ms('p50'), ms('p99'), ms('max')],
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

interface Consumer {
  /** Resolves once the consumer waits for events. */
  start(): Promise<void>;
  close(): Promise<void>;
}

export async function measure(
  ctx: RunContext,
  system: LatencyProducerConfig['system'],
  durationMs: number,
  consumerSystem = system,
): Promise<Measurement> {
  // A raw producer may feed eventrail's consumer, and eventrail's publisher a raw consumer: both use partition 0's stream then.
  const mixed = system !== consumerSystem;
  const stream = mixed ? new EventrailKeys(ctx.prefix, 1).stream(0) : `${ctx.prefix}:stream`;
  const config: LatencyProducerConfig = { url: ctx.url, prefix: ctx.prefix, system, stream, ratePerSecond: RATE_PER_SECOND, durationMs };
  const expected = Math.round((RATE_PER_SECOND * durationMs) / 1000);
  const samples: number[] = [];
  const countdown = new Countdown(expected);
  const record = (payload: BenchPayload): void => {
    samples.push(hostNow() - payload.sentAt);
    countdown.hit();
  };
  const producer = new BenchChild('latency-producer', config);
  let consumer: Consumer | undefined;
  try {
    await producer.next('ready', 60_000);
    consumer = await createConsumer(ctx, consumerSystem, stream, record);
    await consumer.start();
    await sleep(SETTLE_MS);
    producer.send({ type: 'start' });
    const { sent } = await producer.next('done', durationMs + 30_000);
    await countdown.wait(30_000, `${system} latency consumer`);
    const metrics = { p50: percentile(samples, 50), p99: percentile(samples, 99), max: percentile(samples, 100) };
    return { metrics, expected: sent, done: countdown.count };
  } finally {
    await consumer?.close();
    await producer.stop();
  }
}

async function createConsumer(
  ctx: RunContext,
  system: LatencyProducerConfig['system'],
  stream: string,
  record: (payload: BenchPayload) => void,
): Promise<Consumer> {
  switch (system) {
    case 'eventrail': {
      const app = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix, handler: async (message) => record(message.data) });
      return { start: () => startConsumers(app), close: () => app.close() };
    }
    case 'bullmq': {
      const worker = createWorker(ctx.url, ctx.prefix, 1, async (job) => record(job.data));
      return {
        start: async () => {
          await worker.waitUntilReady();
          runWorker(worker);
        },
        close: () => worker.close(),
      };
    }
    case 'raw':
      return rawConsumer(ctx.url, stream, record);
  }
}

/** `XREAD BLOCK` from the last id seen, `JSON.parse` and an awaited no-op per entry, like the drain reference. */
function rawConsumer(url: string, stream: string, record: (payload: BenchPayload) => void): Consumer {
  const client = new Redis(url);
  let running = true;
  let loop: Promise<void> = Promise.resolve();
  const noop = async (): Promise<void> => undefined;
  const run = async (): Promise<void> => {
    let last = '0-0';
    while (running) {
      const reply = (await client.xread('COUNT', 500, 'BLOCK', 1000, 'STREAMS', stream, last)) as XReadReply;
      for (const [id, fields] of reply?.[0][1] ?? []) {
        for (let i = 0; i < fields.length; i += 2) if (fields[i] === 'data') record(JSON.parse(fields[i + 1]) as BenchPayload);
        await noop();
        last = id;
      }
    }
  };
  return {
    start: async () => {
      await client.ping();
      loop = run();
    },
    close: async () => {
      running = false;
      client.disconnect();
      await loop.catch(() => undefined);
    },
  };
}
