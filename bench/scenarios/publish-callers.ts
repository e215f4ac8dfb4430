import Redis from 'ioredis';
import { EventrailPublisher } from '../../lib';
import { createQueue, JOB_OPTIONS } from '../support/bullmq';
import { createEventrailApp } from '../support/eventrail-app';
import { BENCH_EVENT, eventrailLikeFields, minimalFields, PAYLOAD } from '../support/payload';
import { connectionOptions } from '../support/redis-tools';
import { Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { perSecond } from '../support/stats';

/** Calls in flight at once: 1000 callers, each awaiting its own publish before the next. */
const CALLERS = 1000;
/** The lone caller: one publish at a time, so the rate is 1 / the latency of one call. */
const LONE = 1;

/** Publish from many callers: single `publish` calls, 1000 in flight, against auto-pipelined XADD and BullMQ `add`. */
export function publishCallers(size: Size): Scenario {
  const events = size === 'quick' ? 2_000 : 100_000;
  const bullmqEvents = size === 'quick' ? 2_000 : 20_000;
  const loneEvents = size === 'quick' ? 500 : 10_000;
  return {
    id: 'publish-callers',
    title: 'Publish from 1000 concurrent callers',
    metrics: [RATE],
    rounds: size === 'quick' ? 1 : 5,
    warmup: true,
    variants: [
      { id: 'eventrail', label: 'eventrail `publish`', events, run: (ctx) => eventrail(ctx, events, false) },
      { id: 'raw', label: 'raw `XADD` auto-pipelined, 2 fields', events, run: (ctx) => raw(ctx, events, false) },
      { id: 'raw-same', label: 'raw `XADD` auto-pipelined, with `id` and `time`', events, run: (ctx) => raw(ctx, events, true) },
      {
        id: 'eventrail-auto',
        label: 'eventrail `publish`, client with `enableAutoPipelining`',
        events,
        run: (ctx) => eventrail(ctx, events, true),
      },
      { id: 'bullmq', label: 'BullMQ `add`', events: bullmqEvents, run: (ctx) => bullmq(ctx, bullmqEvents) },
      {
        id: 'eventrail-lone',
        label: 'eventrail `publish`, one caller',
        events: loneEvents,
        run: (ctx) => eventrail(ctx, loneEvents, false, LONE),
      },
      {
        id: 'raw-lone',
        label: 'raw `XADD`, one caller, plain client',
        events: loneEvents,
        run: (ctx) => raw(ctx, loneEvents, false, LONE),
      },
    ],
    targets: [
      { label: '`publish` / raw auto-pipelined XADD (2 fields)', variant: 'eventrail', reference: 'raw', metric: 'rate', atLeast: 0.9 },
      { label: '`publish` / raw auto-pipelined XADD with `id` and `time`', variant: 'eventrail', reference: 'raw-same', metric: 'rate' },
      { label: '`publish` / BullMQ `add`', variant: 'eventrail', reference: 'bullmq', metric: 'rate' },
      {
        label: '`publish` (auto-pipelining client) / raw auto-pipelined XADD (2 fields)',
        variant: 'eventrail-auto',
        reference: 'raw',
        metric: 'rate',
      },
      // A lone caller's rate is 1 / its round trip: below 1 means coalescing made a single call slower.
      { label: '`publish`, one caller / raw XADD, one caller', variant: 'eventrail-lone', reference: 'raw-lone', metric: 'rate' },
    ],
  };
}

/** Runs `count` loops that each await `call` until `events` calls were made; returns calls per second. */
async function callers(events: number, call: () => Promise<unknown>, count = CALLERS): Promise<Measurement> {
  let issued = 0;
  let done = 0;
  const caller = async (): Promise<void> => {
    while (issued < events) {
      issued++;
      await call();
      done++;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: count }, caller));
  return { metrics: { rate: perSecond(done, performance.now() - started) }, expected: events, done };
}

/** `autoPipelining`: eventrail's client gets ioredis options with `enableAutoPipelining`, as a user can pass them. */
async function eventrail(ctx: RunContext, events: number, autoPipelining: boolean, count = CALLERS): Promise<Measurement> {
  const redis = autoPipelining ? { ...connectionOptions(ctx.url), maxRetriesPerRequest: 3, enableAutoPipelining: true } : undefined;
  const app = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix, redis });
  try {
    const publisher = app.get(EventrailPublisher);
    return await callers(events, () => publisher.publish(BENCH_EVENT, PAYLOAD), count);
  } finally {
    await app.close();
  }
}

/** Many callers share an auto-pipelining client (the strongest raw reference); a lone caller has a plain one. */
async function raw(ctx: RunContext, events: number, sameFields: boolean, count = CALLERS): Promise<Measurement> {
  const client = new Redis({ ...connectionOptions(ctx.url), maxRetriesPerRequest: 3, enableAutoPipelining: count > 1 });
  try {
    const key = `${ctx.prefix}:stream`;
    const fields = (): string[] => {
      const json = JSON.stringify(PAYLOAD);
      return sameFields ? eventrailLikeFields(json, Date.now()) : minimalFields(json);
    };
    await client.ping();
    return await callers(events, () => client.xadd(key, '*', ...fields()), count);
  } finally {
    client.disconnect();
  }
}

async function bullmq(ctx: RunContext, events: number): Promise<Measurement> {
  const queue = createQueue(ctx.url, ctx.prefix);
  try {
    await queue.waitUntilReady();
    return await callers(events, () => queue.add(BENCH_EVENT, PAYLOAD, JOB_OPTIONS));
  } finally {
    await queue.close();
  }
}
