import Redis from 'ioredis';
import { EventrailKeys } from '../../lib/redis/keys';
import { BenchChild } from '../support/children';
import { createQueue, createWorker, fillQueue, runWorker } from '../support/bullmq';
import { Countdown } from '../support/countdown';
import { createEventrailApp, fillLog, startConsumers } from '../support/eventrail-app';
import { hostNow, eventrailLikeFields, keyOf, minimalFields, PAYLOAD } from '../support/payload';
import { Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { perSecond } from '../support/stats';
import type { DrainWorkerConfig } from '../processes/drain-worker';

/** Events are spread over this many keys, so 8 partitions each get a share. */
const KEYS = 1000;

type XReadReply = Array<[string, Array<[string, string[]]>]> | null;

/** How long a drain may take before the run fails: generous, it only stops a stuck run. */
export function drainDeadline(events: number): number {
  return 30_000 + events;
}

/** Starts the consumers of a filled log or queue and times them until `countdown` has seen every event. */
export async function timeDrain(countdown: Countdown, events: number, what: string, start: () => unknown): Promise<Measurement> {
  const started = performance.now();
  await start();
  await countdown.wait(drainDeadline(events), what);
  return { metrics: { rate: perSecond(events, countdown.finishedAt - started) }, expected: events, done: countdown.count };
}

/** Drain a backlog: a no-op async handler over a prefilled log, against a raw XREAD loop and BullMQ workers. */
export function drain(size: Size): Scenario {
  const quick = size === 'quick';
  const events = quick ? 2_000 : 100_000;
  const bullmq1 = quick ? 500 : 20_000;
  const bullmq50 = quick ? 2_000 : 50_000;
  return {
    id: 'drain',
    title: 'Drain a backlog',
    metrics: [RATE],
    rounds: quick ? 1 : 5,
    warmup: true,
    variants: [
      // Each compared pair runs back to back, so a burst of other work on the host hits both.
      { id: 'p1c1', label: 'eventrail, partitions 1, concurrency 1', events, run: (ctx) => eventrail(ctx, events, 1, 1) },
      { id: 'raw', label: 'raw `XREAD COUNT 500` loop, 2 fields', events, run: (ctx) => raw(ctx, events, false) },
      {
        id: 'p1c1-min',
        label: 'eventrail, partitions 1, concurrency 1, over 2-field entries',
        events,
        run: (ctx) => eventrail(ctx, events, 1, 1, 'minimal'),
      },
      { id: 'raw-same', label: 'raw `XREAD COUNT 500` loop, entries with `id` and `time`', events, run: (ctx) => raw(ctx, events, true) },
      { id: 'p8c8', label: 'eventrail, partitions 8, concurrency 8', events, run: (ctx) => eventrail(ctx, events, 8, 8) },
      {
        id: 'p8c8x2',
        label: 'eventrail, partitions 8, concurrency 8, 2 processes',
        events,
        run: (ctx) => workerProcesses(ctx, events, { partitions: 8, concurrency: 8, processes: 2 }),
      },
      { id: 'bullmq1', label: 'BullMQ Worker, concurrency 1', events: bullmq1, run: (ctx) => bullmq(ctx, bullmq1, 1) },
      { id: 'bullmq50', label: 'BullMQ Worker, concurrency 50', events: bullmq50, run: (ctx) => bullmq(ctx, bullmq50, 50) },
    ],
    targets: [
      { label: 'drain p1 c1 / raw XREAD loop (2 fields)', variant: 'p1c1', reference: 'raw', metric: 'rate', atLeast: 0.85 },
      { label: 'drain p1 c1 / BullMQ concurrency 1', variant: 'p1c1', reference: 'bullmq1', metric: 'rate', atLeast: 25 },
      { label: 'drain p1 c1 / BullMQ concurrency 50', variant: 'p1c1', reference: 'bullmq50', metric: 'rate', atLeast: 5 },
      { label: 'drain p1 c1 / raw XREAD loop (entries with `id` and `time`)', variant: 'p1c1', reference: 'raw-same', metric: 'rate' },
      { label: 'drain p1 c1 over 2-field entries / raw XREAD loop (2 fields)', variant: 'p1c1-min', reference: 'raw', metric: 'rate' },
      { label: 'drain p8 c8 / p1 c1', variant: 'p8c8', reference: 'p1c1', metric: 'rate' },
      { label: 'drain p8 c8, 2 processes / 1 process', variant: 'p8c8x2', reference: 'p8c8', metric: 'rate' },
    ],
  };
}

/**
 * `entries: 'minimal'` fills partition 0 by raw XADD with only `event` and
 * `data` (a valid entry: see the README's wire format), the raw reference's
 * entries, so the ratio shows the consumer's own cost apart from the wire format.
 */
async function eventrail(
  ctx: RunContext,
  events: number,
  partitions: number,
  concurrency: number,
  entries: 'published' | 'minimal' = 'published',
): Promise<Measurement> {
  const countdown = new Countdown(events);
  const app = await createEventrailApp({
    url: ctx.url,
    prefix: ctx.prefix,
    partitions,
    consumer: { concurrency },
    handler: async () => countdown.hit(),
  });
  try {
    if (entries === 'minimal') await fillStream(ctx, new EventrailKeys(ctx.prefix, partitions).stream(0), events, false);
    else await fillLog(app, events, KEYS);
    return await timeDrain(countdown, events, 'eventrail drain', () => startConsumers(app));
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
    const started = hostNow();
    for (const worker of workers) worker.send({ type: 'start' });
    await all.wait(drainDeadline(events), `drain in ${shape.processes} processes (${total()} handled)`);
    const finished = Math.max(...progress.map((p) => p.lastAt));
    return { metrics: { rate: perSecond(events, finished - started) }, expected: events, done: total() };
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
}

/** The reference consumer: `XREAD COUNT 500` from the last id, `JSON.parse` of data and an awaited no-op per entry. */
/** Appends `events` raw entries to `key`: the format before lean entries (`id`, `time`, keyed like the log's) or only `event` and `data`. */
async function fillStream(ctx: RunContext, key: string, events: number, sameFields: boolean): Promise<void> {
  const json = JSON.stringify(PAYLOAD);
  for (let from = 0; from < events; from += 1000) {
    const pipeline = ctx.admin.pipeline();
    const now = Date.now();
    for (let i = from; i < Math.min(events, from + 1000); i++) {
      pipeline.xadd(key, '*', ...(sameFields ? eventrailLikeFields(json, now, keyOf(i, KEYS)) : minimalFields(json)));
    }
    await pipeline.exec();
  }
}

async function raw(ctx: RunContext, events: number, sameFields: boolean): Promise<Measurement> {
  const key = `${ctx.prefix}:stream`;
  await fillStream(ctx, key, events, sameFields);
  const client = new Redis(ctx.url);
  try {
    await client.ping();
    const noop = async (_data: unknown): Promise<void> => undefined;
    let last = '0-0';
    let handled = 0;
    const started = performance.now();
    while (handled < events) {
      const reply = (await client.xread('COUNT', 500, 'STREAMS', key, last)) as XReadReply;
      if (!reply) throw new Error(`raw drain: the stream ended after ${handled} of ${events} entries`);
      for (const [id, fields] of reply[0][1]) {
        let data = '';
        for (let i = 0; i < fields.length; i += 2) {
          if (fields[i] === 'data') data = fields[i + 1];
        }
        await noop(JSON.parse(data));
        handled++;
        last = id;
      }
    }
    return { metrics: { rate: perSecond(handled, performance.now() - started) }, expected: events, done: handled };
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
    return await timeDrain(countdown, events, `BullMQ drain at concurrency ${concurrency}`, () => runWorker(worker));
  } finally {
    await worker.close();
    await queue.close();
  }
}
