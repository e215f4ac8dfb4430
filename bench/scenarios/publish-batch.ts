import Redis from 'ioredis';
import { EventrailPublisher, PublishInput } from '../../lib';
import { createQueue } from '../support/bullmq';
import { JOB_OPTIONS } from '../support/bullmq';
import { createEventrailApp } from '../support/eventrail-app';
import { BENCH_EVENT, eventrailLikeFields, minimalFields, PAYLOAD } from '../support/payload';
import { Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { perSecond } from '../support/stats';

const BATCH = 1000;

/** Publish a batch: `publishMany` of 1000 events a call against pipelined XADD and BullMQ `addBulk`. */
export function publishBatch(size: Size): Scenario {
  const events = size === 'quick' ? 2_000 : 100_000;
  return {
    id: 'publish-batch',
    title: 'Publish a batch (1000 a call)',
    metrics: [RATE],
    rounds: size === 'quick' ? 1 : 5,
    warmup: true,
    variants: [
      { id: 'eventrail', label: 'eventrail `publishMany`', events, run: (ctx) => eventrail(ctx, events) },
      { id: 'raw', label: 'raw pipelined `XADD`, 2 fields', events, run: (ctx) => raw(ctx, events, false) },
      {
        id: 'raw-same',
        label: 'raw pipelined `XADD`, with `id` and `time` (the format before lean entries)',
        events,
        run: (ctx) => raw(ctx, events, true),
      },
      { id: 'bullmq', label: 'BullMQ `addBulk`', events, run: (ctx) => bullmq(ctx, events) },
    ],
    targets: [
      { label: '`publishMany` / raw pipelined XADD (2 fields)', variant: 'eventrail', reference: 'raw', metric: 'rate', atLeast: 0.95 },
      { label: '`publishMany` / BullMQ `addBulk`', variant: 'eventrail', reference: 'bullmq', metric: 'rate', atLeast: 5 },
      { label: '`publishMany` / raw pipelined XADD with `id` and `time`', variant: 'eventrail', reference: 'raw-same', metric: 'rate' },
    ],
  };
}

async function eventrail(ctx: RunContext, events: number): Promise<Measurement> {
  const app = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix });
  try {
    const publisher = app.get(EventrailPublisher);
    const batch: PublishInput[] = Array.from({ length: BATCH }, () => ({ event: BENCH_EVENT, data: PAYLOAD }));
    let done = 0;
    const started = performance.now();
    for (let i = 0; i < events; i += BATCH) done += (await publisher.publishMany(batch)).length;
    return { metrics: { rate: perSecond(done, performance.now() - started) }, expected: events, done };
  } finally {
    await app.close();
  }
}

async function raw(ctx: RunContext, events: number, sameFields: boolean): Promise<Measurement> {
  const client = new Redis(ctx.url);
  try {
    const key = `${ctx.prefix}:stream`;
    let done = 0;
    const started = performance.now();
    for (let i = 0; i < events; i += BATCH) {
      const pipeline = client.pipeline();
      const now = Date.now();
      for (let j = 0; j < BATCH; j++) {
        const json = JSON.stringify(PAYLOAD);
        pipeline.xadd(key, '*', ...(sameFields ? eventrailLikeFields(json, now) : minimalFields(json)));
      }
      const replies = (await pipeline.exec()) ?? [];
      done += replies.filter(([error]) => !error).length;
    }
    return { metrics: { rate: perSecond(done, performance.now() - started) }, expected: events, done };
  } finally {
    client.disconnect();
  }
}

async function bullmq(ctx: RunContext, events: number): Promise<Measurement> {
  const queue = createQueue(ctx.url, ctx.prefix);
  try {
    await queue.waitUntilReady();
    let done = 0;
    const started = performance.now();
    for (let i = 0; i < events; i += BATCH) {
      const jobs = Array.from({ length: BATCH }, () => ({ name: BENCH_EVENT, data: PAYLOAD, opts: JOB_OPTIONS }));
      done += (await queue.addBulk(jobs)).length;
    }
    return { metrics: { rate: perSecond(done, performance.now() - started) }, expected: events, done };
  } finally {
    await queue.close();
  }
}
