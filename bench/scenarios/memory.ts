import { EventrailKeys } from '../../lib/redis/keys';
import { createQueue, fillQueue } from '../support/bullmq';
import { createEventrailApp, fillLog } from '../support/eventrail-app';
import { eventrailLikeFields, minimalFields, PAYLOAD } from '../support/payload';
import { usedMemory } from '../support/redis-tools';
import { Measurement, RunContext, Scenario, Size } from '../support/scenario';

/** Memory: Redis `used_memory` growth per event after appending a backlog, against raw stream entries and BullMQ jobs. */
export function memory(size: Size): Scenario {
  const events = size === 'quick' ? 1_000 : 100_000;
  return {
    id: 'memory',
    title: 'Redis memory per event',
    metrics: [{ key: 'bytes', unit: 'bytes/event', digits: 0 }],
    rounds: size === 'quick' ? 1 : 2,
    warmup: false,
    variants: [
      { id: 'eventrail', label: 'eventrail log entry', events, run: (ctx) => eventrail(ctx, events) },
      {
        id: 'raw-same',
        label: 'raw stream entry with `id` and `time` (the format before lean entries)',
        events,
        run: (ctx) => raw(ctx, events, true),
      },
      { id: 'raw', label: 'raw stream entry, 2 fields', events, run: (ctx) => raw(ctx, events, false) },
      { id: 'bullmq', label: 'BullMQ waiting job', events, run: (ctx) => bullmq(ctx, events) },
    ],
    targets: [
      { label: 'memory / raw 2-field entry', variant: 'eventrail', reference: 'raw', metric: 'bytes', atMost: 1.05 },
      { label: 'memory / raw entry with `id` and `time`', variant: 'eventrail', reference: 'raw-same', metric: 'bytes' },
      { label: 'memory / BullMQ waiting job', variant: 'eventrail', reference: 'bullmq', metric: 'bytes', atMost: 0.5 },
    ],
  };
}

/** Runs `fill` between two `used_memory` readings; the connections are open before the first. */
async function perEvent(ctx: RunContext, events: number, fill: () => Promise<void>): Promise<Measurement> {
  const before = await usedMemory(ctx.admin);
  await fill();
  const after = await usedMemory(ctx.admin);
  return { metrics: { bytes: (after - before) / events }, expected: events, done: events };
}

async function eventrail(ctx: RunContext, events: number): Promise<Measurement> {
  const app = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix });
  try {
    const measurement = await perEvent(ctx, events, () => fillLog(app, events));
    measurement.done = await ctx.admin.xlen(new EventrailKeys(ctx.prefix, 1).stream(0));
    return measurement;
  } finally {
    await app.close();
  }
}

async function raw(ctx: RunContext, events: number, sameFields: boolean): Promise<Measurement> {
  const key = `${ctx.prefix}:stream`;
  const json = JSON.stringify(PAYLOAD);
  const measurement = await perEvent(ctx, events, async () => {
    for (let from = 0; from < events; from += 1000) {
      const pipeline = ctx.admin.pipeline();
      const now = Date.now();
      for (let i = from; i < Math.min(events, from + 1000); i++) {
        pipeline.xadd(key, '*', ...(sameFields ? eventrailLikeFields(json, now) : minimalFields(json)));
      }
      await pipeline.exec();
    }
  });
  measurement.done = await ctx.admin.xlen(key);
  return measurement;
}

async function bullmq(ctx: RunContext, events: number): Promise<Measurement> {
  const queue = createQueue(ctx.url, ctx.prefix);
  try {
    await queue.waitUntilReady();
    const measurement = await perEvent(ctx, events, () => fillQueue(queue, events));
    measurement.done = await queue.getWaitingCount();
    return measurement;
  } finally {
    await queue.close();
  }
}
