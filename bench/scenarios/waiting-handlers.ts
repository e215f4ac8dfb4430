import { setTimeout as sleep } from 'node:timers/promises';
import { createQueue, createWorker, fillQueue, runWorker } from '../support/bullmq';
import { Countdown } from '../support/countdown';
import { createEventrailApp, fillLog, startConsumers } from '../support/eventrail-app';
import { Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { timeDrain } from './drain';

const KEYS = 1000;
const CONCURRENCY = 64;
/** What each handler waits for, standing in for a database or HTTP call. */
const WAIT_MS = 1;

/** Handlers that wait ~1 ms: eventrail at partitions 8, concurrency 64 against a BullMQ worker at concurrency 64. */
export function waitingHandlers(size: Size): Scenario {
  const events = size === 'quick' ? 500 : 100_000;
  return {
    id: 'waiting-handlers',
    title: 'Handlers that wait 1 ms',
    metrics: [RATE],
    rounds: size === 'quick' ? 1 : 7,
    warmup: true,
    variants: [
      { id: 'eventrail', label: 'eventrail, partitions 8, concurrency 64', events, run: (ctx) => eventrail(ctx, events) },
      { id: 'bullmq', label: 'BullMQ Worker, concurrency 64', events, run: (ctx) => bullmq(ctx, events) },
    ],
    targets: [{ label: 'waiting handlers / BullMQ', variant: 'eventrail', reference: 'bullmq', metric: 'rate', atLeast: 2 }],
  };
}

async function handler(countdown: Countdown): Promise<void> {
  await sleep(WAIT_MS);
  countdown.hit();
}

async function eventrail(ctx: RunContext, events: number): Promise<Measurement> {
  const countdown = new Countdown(events);
  const app = await createEventrailApp({
    url: ctx.url,
    prefix: ctx.prefix,
    partitions: 8,
    consumer: { concurrency: CONCURRENCY },
    handler: () => handler(countdown),
  });
  try {
    await fillLog(app, events, KEYS);
    return await timeDrain(ctx, countdown, events, 'eventrail with waiting handlers', () => startConsumers(app));
  } finally {
    await app.close();
  }
}

async function bullmq(ctx: RunContext, events: number): Promise<Measurement> {
  const queue = createQueue(ctx.url, ctx.prefix);
  const countdown = new Countdown(events);
  const worker = createWorker(ctx.url, ctx.prefix, CONCURRENCY, () => handler(countdown));
  try {
    await fillQueue(queue, events);
    await worker.waitUntilReady();
    return await timeDrain(ctx, countdown, events, 'BullMQ with waiting handlers', () => runWorker(worker));
  } finally {
    await worker.close();
    await queue.close();
  }
}
