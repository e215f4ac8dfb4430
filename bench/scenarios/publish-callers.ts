import Redis from 'ioredis';
import { EventrailPublisher } from '../../lib';
import { createQueue, JOB_OPTIONS } from '../support/bullmq';
import { createEventrailApp } from '../support/eventrail-app';
import { COSTS, Meter } from '../support/meter';
import { BENCH_EVENT, minimalFields, PAYLOAD } from '../support/payload';
import { multiXaddClient, tickCorkedXadd, tickMultiExec, tickMultiXadd } from '../support/raw-writers';
import { connectionOptions } from '../support/redis-tools';
import { Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { perSecond } from '../support/stats';

/** Calls in flight at once: 1000 callers, each awaiting its own publish before the next. */
const CALLERS = 1000;
/** The lone caller: one publish at a time, so the rate is 1 / the latency of one call. */
const LONE = 1;

/**
 * Publish from many callers: single `publish` calls, 1000 in flight, against the best raw code for
 * the same entries (XADDs corked per tick; Lua multi-XADDs and ioredis transactions of up to 128 per
 * tick), ioredis auto-pipelining and BullMQ `add`.
 */
export function publishCallers(size: Size): Scenario {
  const events = size === 'quick' ? 2_000 : 100_000;
  const bullmqEvents = size === 'quick' ? 2_000 : 20_000;
  const loneEvents = size === 'quick' ? 500 : 10_000;
  return {
    id: 'publish-callers',
    title: 'Publish from 1000 concurrent callers',
    metrics: [RATE, ...COSTS],
    rounds: size === 'quick' ? 1 : 7,
    warmup: true,
    sharedCore: true,
    isolated: true,
    variants: [
      { id: 'eventrail', label: 'eventrail `publish`', events, run: (ctx) => eventrail(ctx, events, false) },
      { id: 'corked', label: 'raw `XADD`, socket corked per tick', events, run: (ctx) => corked(ctx, events) },
      { id: 'lua', label: 'raw Lua multi-XADD per tick', events, run: (ctx) => lua(ctx, events) },
      { id: 'multi', label: 'raw `MULTI`/`EXEC` of up to 128 XADDs per tick (ioredis `multi`)', events, run: (ctx) => multi(ctx, events) },
      { id: 'raw', label: 'raw `XADD` auto-pipelined (ioredis `enableAutoPipelining`)', events, run: (ctx) => raw(ctx, events) },
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
        run: (ctx) => raw(ctx, loneEvents, LONE),
      },
    ],
    targets: [
      { label: '`publish` / raw XADD corked per tick', variant: 'eventrail', reference: 'corked', metric: 'rate', atLeast: 0.95 },
      { label: '`publish` / raw Lua multi-XADD per tick', variant: 'eventrail', reference: 'lua', metric: 'rate' },
      { label: '`publish` / raw `MULTI`/`EXEC` of 128 per tick', variant: 'eventrail', reference: 'multi', metric: 'rate' },
      { label: '`publish` / raw auto-pipelined XADD', variant: 'eventrail', reference: 'raw', metric: 'rate' },
      {
        label: 'Redis CPU per event: `publish` / raw XADD corked per tick',
        variant: 'eventrail',
        reference: 'corked',
        metric: 'redisUs',
      },
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

/** Runs `count` loops that each await `call` until `events` calls were made; returns calls per second and their costs. */
async function callers(ctx: RunContext, events: number, call: () => Promise<unknown>, count = CALLERS): Promise<Measurement> {
  let issued = 0;
  let done = 0;
  const caller = async (): Promise<void> => {
    while (issued < events) {
      issued++;
      await call();
      done++;
    }
  };
  const meter = await Meter.start(ctx.admin);
  const started = performance.now();
  await Promise.all(Array.from({ length: count }, caller));
  const rate = perSecond(done, performance.now() - started);
  return { metrics: { rate, ...(await meter.stop(done)) }, expected: events, done };
}

/** `autoPipelining`: eventrail's client gets ioredis options with `enableAutoPipelining`, as a user can pass them. */
async function eventrail(ctx: RunContext, events: number, autoPipelining: boolean, count = CALLERS): Promise<Measurement> {
  const redis = autoPipelining ? { ...connectionOptions(ctx.url), maxRetriesPerRequest: 3, enableAutoPipelining: true } : undefined;
  const app = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix, redis });
  try {
    const publisher = app.get(EventrailPublisher);
    return await callers(ctx, events, () => publisher.publish(BENCH_EVENT, PAYLOAD), count);
  } finally {
    await app.close();
  }
}

/** Many callers share an auto-pipelining client (what ioredis offers for this); a lone caller has a plain one. */
async function raw(ctx: RunContext, events: number, count = CALLERS): Promise<Measurement> {
  const client = new Redis({ ...connectionOptions(ctx.url), maxRetriesPerRequest: 3, enableAutoPipelining: count > 1 });
  try {
    const key = `${ctx.prefix}:stream`;
    await client.ping();
    return await callers(ctx, events, () => client.xadd(key, '*', ...minimalFields(JSON.stringify(PAYLOAD))), count);
  } finally {
    client.disconnect();
  }
}

/** A plain client, its socket corked for the callers of one tick. */
async function corked(ctx: RunContext, events: number): Promise<Measurement> {
  const client = new Redis(ctx.url);
  try {
    await client.ping();
    return await callers(ctx, events, tickCorkedXadd(client, `${ctx.prefix}:stream`));
  } finally {
    client.disconnect();
  }
}

/** The callers of one tick share one Lua multi-XADD. */
async function lua(ctx: RunContext, events: number): Promise<Measurement> {
  const client = multiXaddClient(ctx.url);
  try {
    const key = `${ctx.prefix}:stream`;
    const call = tickMultiXadd(client, key);
    await call(); // loads the script outside the clock
    await client.del(key);
    return await callers(ctx, events, call);
  } finally {
    client.disconnect();
  }
}

/** The callers of one tick share ioredis transactions of up to 128 XADDs (what eventrail's coalescing sends). */
async function multi(ctx: RunContext, events: number): Promise<Measurement> {
  const client = new Redis(ctx.url);
  try {
    await client.ping();
    return await callers(ctx, events, tickMultiExec(client, `${ctx.prefix}:stream`));
  } finally {
    client.disconnect();
  }
}

async function bullmq(ctx: RunContext, events: number): Promise<Measurement> {
  const queue = createQueue(ctx.url, ctx.prefix);
  try {
    await queue.waitUntilReady();
    return await callers(ctx, events, () => queue.add(BENCH_EVENT, PAYLOAD, JOB_OPTIONS));
  } finally {
    await queue.close();
  }
}
