import Redis from 'ioredis';
import { EventrailPublisher, PublishInput } from '../../lib';
import { createQueue, JOB_OPTIONS } from '../support/bullmq';
import { createEventrailApp } from '../support/eventrail-app';
import { COSTS, Meter } from '../support/meter';
import { BENCH_EVENT, PAYLOAD } from '../support/payload';
import { corkedXaddBatch, multiExecBatch, multiXaddBatch, multiXaddClient, serverCeiling } from '../support/raw-writers';
import { Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { perSecond } from '../support/stats';

const BATCH = 1000;
/** The raw Lua writer's run length: 125 entries a script call measured best (8 calls a batch). */
const RUN = 125;

/**
 * Publish a batch: `publishMany` of 1000 events a call against the best raw writers for the same
 * entries (a Lua multi-XADD, corked XADDs), the server's own ceiling, and BullMQ `addBulk`.
 */
export function publishBatch(size: Size): Scenario {
  const events = size === 'quick' ? 2_000 : 100_000;
  return {
    id: 'publish-batch',
    title: 'Publish a batch (1000 a call)',
    metrics: [RATE, ...COSTS],
    rounds: size === 'quick' ? 1 : 7,
    warmup: true,
    sharedCore: true,
    isolated: true,
    variants: [
      { id: 'eventrail', label: 'eventrail `publishMany`', events, run: (ctx) => eventrail(ctx, events) },
      { id: 'lua', label: `raw Lua multi-XADD, runs of ${RUN}`, events, run: (ctx) => rawLua(ctx, events) },
      { id: 'corked', label: 'raw XADDs, socket corked per batch', events, run: (ctx) => rawCorked(ctx, events) },
      // The raw writers that append a batch all or nothing, as `publishMany` does: Redis runs either only once it has all of it.
      {
        id: 'multi',
        label: 'raw `MULTI`/`EXEC` of the batch (ioredis `multi`: all or nothing)',
        events,
        run: (ctx) => rawMulti(ctx, events),
      },
      { id: 'lua-whole', label: 'raw Lua multi-XADD, the batch in one call', events, run: (ctx) => rawLua(ctx, events, BATCH) },
      { id: 'ceiling', label: '`redis-benchmark` XADD, 50 clients, `-P 100`', events, run: (ctx) => ceiling(ctx, events) },
      { id: 'bullmq', label: 'BullMQ `addBulk`', events, run: (ctx) => bullmq(ctx, events) },
    ],
    targets: [
      { label: '`publishMany` / raw Lua multi-XADD (same entries)', variant: 'eventrail', reference: 'lua', metric: 'rate', atLeast: 0.9 },
      {
        label: 'Redis CPU per appended entry: `publishMany` / corked XADDs',
        variant: 'eventrail',
        reference: 'corked',
        metric: 'redisUs',
        atMost: 1.2,
      },
      { label: '`publishMany` / corked XADDs', variant: 'eventrail', reference: 'corked', metric: 'rate' },
      {
        label: '`publishMany` / raw `MULTI` of the batch (all or nothing, as it is)',
        variant: 'eventrail',
        reference: 'multi',
        metric: 'rate',
      },
      { label: '`publishMany` / raw Lua multi-XADD, the batch in one call', variant: 'eventrail', reference: 'lua-whole', metric: 'rate' },
      {
        label: '`publishMany` / the server ceiling (`redis-benchmark -P 100`)',
        variant: 'eventrail',
        reference: 'ceiling',
        metric: 'rate',
      },
      { label: '`publishMany` / BullMQ `addBulk`', variant: 'eventrail', reference: 'bullmq', metric: 'rate', atLeast: 5 },
    ],
  };
}

/** Times `batches` calls of `send` (each appending BATCH entries), metering Redis and this process. */
async function timeBatches(ctx: RunContext, events: number, send: () => Promise<number>): Promise<Measurement> {
  let done = 0;
  const meter = await Meter.start(ctx.admin);
  const started = performance.now();
  for (let i = 0; i < events; i += BATCH) done += await send();
  const rate = perSecond(done, performance.now() - started);
  return { metrics: { rate, ...(await meter.stop(done)) }, expected: events, done };
}

async function eventrail(ctx: RunContext, events: number): Promise<Measurement> {
  const app = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix });
  try {
    const publisher = app.get(EventrailPublisher);
    const batch: PublishInput[] = Array.from({ length: BATCH }, () => ({ event: BENCH_EVENT, data: PAYLOAD }));
    return await timeBatches(ctx, events, async () => (await publisher.publishMany(batch)).length);
  } finally {
    await app.close();
  }
}

async function rawLua(ctx: RunContext, events: number, run = RUN): Promise<Measurement> {
  const client = multiXaddClient(ctx.url);
  try {
    const key = `${ctx.prefix}:stream`;
    await multiXaddBatch(client, key, run, run); // loads the script outside the clock
    await client.del(key);
    return await timeBatches(ctx, events, async () => (await multiXaddBatch(client, key, BATCH, run)).length);
  } finally {
    client.disconnect();
  }
}

async function rawMulti(ctx: RunContext, events: number): Promise<Measurement> {
  const client = new Redis(ctx.url);
  try {
    await client.ping();
    return await timeBatches(ctx, events, async () => (await multiExecBatch(client, `${ctx.prefix}:stream`, BATCH)).length);
  } finally {
    client.disconnect();
  }
}

async function rawCorked(ctx: RunContext, events: number): Promise<Measurement> {
  const client = new Redis(ctx.url);
  try {
    await client.ping();
    return await timeBatches(ctx, events, async () => (await corkedXaddBatch(client, `${ctx.prefix}:stream`, BATCH)).length);
  } finally {
    client.disconnect();
  }
}

/** redis-benchmark's own rate; the meter's client CPU is this process's (idle), not redis-benchmark's. */
async function ceiling(ctx: RunContext, events: number): Promise<Measurement> {
  const meter = await Meter.start(ctx.admin);
  const rate = await serverCeiling(ctx.url, `${ctx.prefix}:stream`, events);
  if (rate === undefined) throw new Error('redis-benchmark did not run (is it installed? Debian: redis-tools)');
  const length = await ctx.admin.xlen(`${ctx.prefix}:stream`);
  return { metrics: { rate, ...(await meter.stop(length)), clientUs: NaN }, expected: events, done: length };
}

async function bullmq(ctx: RunContext, events: number): Promise<Measurement> {
  const queue = createQueue(ctx.url, ctx.prefix);
  try {
    await queue.waitUntilReady();
    return await timeBatches(ctx, events, async () => {
      const jobs = Array.from({ length: BATCH }, () => ({ name: BENCH_EVENT, data: PAYLOAD, opts: JOB_OPTIONS }));
      return (await queue.addBulk(jobs)).length;
    });
  } finally {
    await queue.close();
  }
}
