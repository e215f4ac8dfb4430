import Redis from 'ioredis';
import { randomUUID } from 'node:crypto';
import { Countdown } from '../support/countdown';
import { createEventrailApp, fillLog, startConsumers } from '../support/eventrail-app';
import { BENCH_EVENT, PAYLOAD } from '../support/payload';
import { Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { perSecond } from '../support/stats';
import { timeDrain } from './drain';

/** The design eventrail replaces: a list, an offset and a lock, several round trips per event. */
export function listLock(size: Size): Scenario {
  const events = size === 'quick' ? 500 : 20_000;
  return {
    id: 'list-lock',
    title: 'Drain, against the design it replaces',
    metrics: [RATE],
    rounds: size === 'quick' ? 1 : 3,
    warmup: true,
    variants: [
      { id: 'eventrail', label: 'eventrail, partitions 1, concurrency 1', events, run: (ctx) => eventrail(ctx, events) },
      { id: 'list-lock', label: 'list + offset + lock, one event per lock', events, run: (ctx) => listLockConsumer(ctx, events) },
    ],
    targets: [{ label: 'drain p1 c1 / list + offset + lock', variant: 'eventrail', reference: 'list-lock', metric: 'rate' }],
  };
}

async function eventrail(ctx: RunContext, events: number): Promise<Measurement> {
  const countdown = new Countdown(events);
  const app = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix, handler: async () => countdown.hit() });
  try {
    await fillLog(app, events);
    return await timeDrain(ctx, countdown, events, 'eventrail drain', () => startConsumers(app));
  } finally {
    await app.close();
  }
}

/**
 * Per event: take the lock (`SET NX PX`), read the entry at the offset
 * (`LINDEX`), handle it (`JSON.parse`, an awaited no-op), move the offset
 * (`INCR`), release the lock (`DEL`): four round trips, one event at a time.
 */
async function listLockConsumer(ctx: RunContext, events: number): Promise<Measurement> {
  const list = `${ctx.prefix}:events`;
  const offsetKey = `${ctx.prefix}:offset:bench`;
  const lockKey = `${ctx.prefix}:lock:bench`;
  for (let from = 0; from < events; from += 1000) {
    const size = Math.min(1000, events - from);
    const now = Date.now();
    const entries = Array.from({ length: size }, () => JSON.stringify({ id: randomUUID(), event: BENCH_EVENT, time: now, data: PAYLOAD }));
    await ctx.admin.rpush(list, ...entries);
  }
  const client = new Redis(ctx.url);
  try {
    await client.ping();
    const token = randomUUID();
    const noop = async (_data: unknown): Promise<void> => undefined;
    let offset = Number((await client.get(offsetKey)) ?? 0);
    let handled = 0;
    const started = performance.now();
    while (handled < events) {
      if ((await client.set(lockKey, token, 'PX', 30_000, 'NX')) !== 'OK') throw new Error('list + lock: lock held by someone else');
      const entry = await client.lindex(list, offset);
      if (entry === null) throw new Error(`list + lock: list ended after ${handled} of ${events}`);
      await noop(JSON.parse(entry));
      offset = await client.incr(offsetKey);
      await client.del(lockKey);
      handled++;
    }
    return { metrics: { rate: perSecond(handled, performance.now() - started) }, expected: events, done: handled };
  } finally {
    client.disconnect();
  }
}
