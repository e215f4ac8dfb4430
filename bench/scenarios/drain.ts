import Redis from 'ioredis';
import { EventrailKeys } from '../../lib/redis/keys';
import { BenchChild } from '../support/children';
import { createQueue, createWorker, fillQueue, runWorker } from '../support/bullmq';
import { Countdown } from '../support/countdown';
import { createEventrailApp, fillLog, startConsumers } from '../support/eventrail-app';
import { COSTS, Meter, TOTAL_CPU } from '../support/meter';
import { hostNow } from '../support/payload';
import type { XReadBufferReply } from '../../lib/redis/stream-read';
import { DEFAULT_CONSUMER_OPTIONS } from '../../lib/consumer/consumer.options';
import type { BullmqWorkerConfig } from '../processes/bullmq-worker';
import { Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { perSecond } from '../support/stats';
import type { DrainWorkerConfig } from '../processes/drain-worker';

/** Events are spread over this many keys, so 8 partitions each get a share. */
const KEYS = 1000;

/** The consumer's default batch: the raw reader reads as many entries a call. */
const BATCH = DEFAULT_CONSUMER_OPTIONS.batchSize;
/** The default read mode; the other one is measured beside it. */
const PACKED_DEFAULT = DEFAULT_CONSUMER_OPTIONS.packedBacklogReads;

/** How long a drain may take before the run fails: generous, it only stops a stuck run. */
export function drainDeadline(events: number): number {
  return 30_000 + events;
}

/** Starts the consumers of a filled log or queue and times them until `countdown` has seen every event, metering the drain. */
export async function timeDrain(
  ctx: RunContext,
  countdown: Countdown,
  events: number,
  what: string,
  start: () => unknown,
): Promise<Measurement> {
  const meter = await Meter.start(ctx.admin);
  const started = performance.now();
  await start();
  await countdown.wait(drainDeadline(events), what);
  const rate = perSecond(events, countdown.finishedAt - started);
  return { metrics: { rate, ...(await meter.stop(events)) }, expected: events, done: countdown.count };
}

/**
 * Drain a backlog: a no-op async handler over a prefilled log, against the best raw reader of the
 * same entries (`xreadBuffer` with prefetch) and BullMQ workers at several settings.
 */
export function drain(size: Size): Scenario {
  const quick = size === 'quick';
  const events = quick ? 2_000 : 100_000;
  // BullMQ drains as many jobs as eventrail events (the method's 100,000): at 20,000 and 50,000 its fixed
  // cost (the worker's start, its first blocking read) weighed on it more than on eventrail.
  const bullmq1 = quick ? 500 : 100_000;
  const bullmqMany = quick ? 2_000 : 100_000;
  return {
    id: 'drain',
    title: 'Drain a backlog',
    metrics: [RATE, ...COSTS, TOTAL_CPU],
    rounds: quick ? 1 : 7,
    warmup: true,
    sharedCore: true,
    variants: [
      { id: 'p1c1', label: 'eventrail, partitions 1, concurrency 1', events, run: (ctx) => eventrail(ctx, events, 1, 1) },
      {
        id: 'raw',
        label: `raw \`xreadBuffer COUNT ${BATCH}\` with prefetch, same entries`,
        events,
        run: (ctx) => raw(ctx, events),
      },
      {
        id: 'p1c1-other',
        label: `eventrail, partitions 1, concurrency 1, \`packedBacklogReads: ${!PACKED_DEFAULT}\``,
        events,
        run: (ctx) => eventrail(ctx, events, 1, 1, !PACKED_DEFAULT),
      },
      {
        id: 'p1c1-ioredis',
        label: "eventrail, partitions 1, concurrency 1, replies read by ioredis's decoder (`EVENTRAIL_REPLY_READER=ioredis`)",
        events,
        run: (ctx) => withIoredisReplies(() => eventrail(ctx, events, 1, 1)),
      },
      { id: 'p8c8', label: 'eventrail, partitions 8, concurrency 8', events, run: (ctx) => eventrail(ctx, events, 8, 8) },
      {
        id: 'p8c8x2',
        label: 'eventrail, partitions 8, concurrency 8, 2 processes',
        events,
        run: (ctx) => workerProcesses(ctx, events, { partitions: 8, concurrency: 8, processes: 2 }),
      },
      { id: 'bullmq1', label: 'BullMQ Worker, concurrency 1', events: bullmq1, run: (ctx) => bullmq(ctx, bullmq1, 1) },
      { id: 'bullmq50', label: 'BullMQ Worker, concurrency 50', events: bullmqMany, run: (ctx) => bullmq(ctx, bullmqMany, 50) },
      { id: 'bullmq200', label: 'BullMQ Worker, concurrency 200', events: bullmqMany, run: (ctx) => bullmq(ctx, bullmqMany, 200) },
      {
        id: 'bullmq50x2',
        label: 'BullMQ Worker, concurrency 50, 2 processes',
        events: bullmqMany,
        run: (ctx) => bullmqProcesses(ctx, bullmqMany, 50, 2),
      },
    ],
    targets: [
      { label: 'drain p1 c1 / raw `xreadBuffer` with prefetch', variant: 'p1c1', reference: 'raw', metric: 'rate', atLeast: 0.9 },
      {
        label: 'client + Redis CPU per delivered event: p1 c1 / raw `xreadBuffer` with prefetch',
        variant: 'p1c1',
        reference: 'raw',
        metric: 'cpuUs',
        atMost: 1.2,
      },
      {
        label: 'Redis CPU per delivered event: p1 c1 / raw `xreadBuffer` with prefetch',
        variant: 'p1c1',
        reference: 'raw',
        metric: 'redisUs',
      },
      {
        label: `drain p1 c1 with \`packedBacklogReads: ${!PACKED_DEFAULT}\` / raw \`xreadBuffer\``,
        variant: 'p1c1-other',
        reference: 'raw',
        metric: 'rate',
      },
      {
        label: 'drain p1 c1 / BullMQ at its best setting (c1, c50, c200, c50 in 2 processes)',
        variant: 'p1c1',
        bestOf: ['bullmq1', 'bullmq50', 'bullmq200', 'bullmq50x2'],
        metric: 'rate',
        atLeast: 10,
      },
      { label: "drain p1 c1 / the same with ioredis's reply decoder", variant: 'p1c1', reference: 'p1c1-ioredis', metric: 'rate' },
      {
        label: "client + Redis CPU per delivered event: p1 c1 / the same with ioredis's reply decoder",
        variant: 'p1c1',
        reference: 'p1c1-ioredis',
        metric: 'cpuUs',
      },
      { label: 'drain p1 c1 / BullMQ concurrency 1', variant: 'p1c1', reference: 'bullmq1', metric: 'rate' },
      { label: 'drain p8 c8 / p1 c1', variant: 'p8c8', reference: 'p1c1', metric: 'rate' },
      { label: 'drain p8 c8, 2 processes / 1 process', variant: 'p8c8x2', reference: 'p8c8', metric: 'rate' },
    ],
  };
}

/** Runs `run` with the workers' read connections left to ioredis's reply decoder (lib/redis/own-reply-reader.ts). */
async function withIoredisReplies<T>(run: () => Promise<T>): Promise<T> {
  const before = process.env.EVENTRAIL_REPLY_READER;
  process.env.EVENTRAIL_REPLY_READER = 'ioredis';
  try {
    return await run();
  } finally {
    if (before === undefined) delete process.env.EVENTRAIL_REPLY_READER;
    else process.env.EVENTRAIL_REPLY_READER = before;
  }
}

/** `packed`: the group's `packedBacklogReads` (the default when left out). */
async function eventrail(ctx: RunContext, events: number, partitions: number, concurrency: number, packed?: boolean): Promise<Measurement> {
  const countdown = new Countdown(events);
  const app = await createEventrailApp({
    url: ctx.url,
    prefix: ctx.prefix,
    partitions,
    consumer: { concurrency, ...(packed === undefined ? {} : { packedBacklogReads: packed }) },
    handler: async () => countdown.hit(),
  });
  try {
    await fillLog(app, events, KEYS);
    return await timeDrain(ctx, countdown, events, 'eventrail drain', () => startConsumers(app));
  } finally {
    await app.close();
  }
}

/**
 * Worker processes share the partitions; the clock runs from "start" to the
 * last event any of them handled. (With `processes: 1` it profiles a consumer
 * alone: BENCH_CHILD_NODE_ARGS=--cpu-prof.)
 */
export async function workerProcesses(
  ctx: RunContext,
  events: number,
  shape: { partitions: number; concurrency: number; processes: number },
): Promise<Measurement> {
  const publisher = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix, partitions: shape.partitions });
  try {
    await fillLog(publisher, events, KEYS);
  } finally {
    await publisher.close();
  }
  const config: DrainWorkerConfig = { url: ctx.url, prefix: ctx.prefix, partitions: shape.partitions, concurrency: shape.concurrency };
  const workers = Array.from({ length: shape.processes }, () => new BenchChild('drain-worker', config));
  return timeChildren(ctx, workers, events, `drain in ${shape.processes} processes`);
}

/**
 * The best raw reader of the same log: eventrail's publisher fills one partition, then one
 * `xreadBuffer COUNT batchSize` loop reads it, the next read sent before the batch in hand is
 * handled (prefetch), `data` decoded with `JSON.parse` and an awaited no-op per entry.
 */
async function raw(ctx: RunContext, events: number): Promise<Measurement> {
  const app = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix, partitions: 1 });
  try {
    await fillLog(app, events, KEYS);
  } finally {
    await app.close();
  }
  const key = new EventrailKeys(ctx.prefix, 1).stream(0);
  const client = new Redis(ctx.url);
  try {
    await client.ping();
    const noop = async (_data: unknown): Promise<void> => undefined;
    const read = (after: string | Buffer): Promise<XReadBufferReply> =>
      client.xreadBuffer('COUNT', BATCH, 'STREAMS', key, after) as Promise<XReadBufferReply>;
    const dataField = Buffer.from('data');
    let handled = 0;
    const meter = await Meter.start(ctx.admin);
    const started = performance.now();
    let next = read('0-0');
    while (handled < events) {
      const reply = await next;
      if (!reply) throw new Error(`raw drain: the stream ended after ${handled} of ${events} entries`);
      const entries = reply[0][1];
      next = read(entries[entries.length - 1][0]);
      for (const [, fields] of entries) {
        let data: Buffer | undefined;
        for (let i = 0; i < fields.length; i += 2) {
          if (fields[i].equals(dataField)) data = fields[i + 1];
        }
        await noop(JSON.parse((data as Buffer).toString()));
        handled++;
      }
    }
    const rate = perSecond(handled, performance.now() - started);
    await next;
    return { metrics: { rate, ...(await meter.stop(handled)) }, expected: events, done: handled };
  } finally {
    client.disconnect();
  }
}

async function bullmq(ctx: RunContext, events: number, concurrency: number): Promise<Measurement> {
  const queue = createQueue(ctx.url, ctx.prefix);
  const countdown = new Countdown(events);
  const worker = createWorker(ctx.url, ctx.prefix, concurrency, async () => countdown.hit());
  try {
    await fillQueue(queue, events);
    await worker.waitUntilReady();
    return await timeDrain(ctx, countdown, events, `BullMQ drain at concurrency ${concurrency}`, () => runWorker(worker));
  } finally {
    await worker.close();
    await queue.close();
  }
}

/** BullMQ workers in `processes` child processes share one filled queue; timed like `workerProcesses`. */
async function bullmqProcesses(ctx: RunContext, events: number, concurrency: number, processes: number): Promise<Measurement> {
  const queue = createQueue(ctx.url, ctx.prefix);
  try {
    await fillQueue(queue, events);
  } finally {
    await queue.close();
  }
  const config: BullmqWorkerConfig = { url: ctx.url, prefix: ctx.prefix, concurrency };
  const workers = Array.from({ length: processes }, () => new BenchChild('bullmq-worker', config));
  return timeChildren(ctx, workers, events, `BullMQ drain in ${processes} processes`);
}

/**
 * Starts worker processes that are ready to drain one filled log or queue and times them from "start" to the last
 * event any of them handled (their progress reports), metering Redis and their CPU; stops them afterwards.
 */
async function timeChildren(ctx: RunContext, workers: BenchChild[], events: number, what: string): Promise<Measurement> {
  try {
    await Promise.all(workers.map((w) => w.next('ready', 60_000)));
    const progress = workers.map(() => ({ handled: 0, lastAt: 0 }));
    const total = (): number => progress.reduce((sum, p) => sum + p.handled, 0);
    const all = new Countdown(1);
    workers.forEach((worker, i) =>
      worker.on((report) => {
        if (report.type !== 'progress') return;
        progress[i] = report;
        if (total() >= events && all.count === 0) all.hit();
      }),
    );
    const meter = await Meter.start(
      ctx.admin,
      workers.map((w) => w.pid as number),
    );
    const started = hostNow();
    for (const worker of workers) worker.send({ type: 'start' });
    await all.wait(drainDeadline(events), `${what} (${total()} handled)`);
    const rate = perSecond(events, Math.max(...progress.map((p) => p.lastAt)) - started);
    return { metrics: { rate, ...(await meter.stop(events)) }, expected: events, done: total() };
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
}
