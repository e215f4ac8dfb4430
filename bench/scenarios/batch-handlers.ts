import { Inject, Injectable } from '@nestjs/common';
import Redis from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventrailMessage, OnEvent } from '../../lib';
import { Countdown } from '../support/countdown';
import { BENCH_GROUP, createEventrailApp, fillLog, startConsumers } from '../support/eventrail-app';
import { BENCH_EVENT, BenchPayload } from '../support/payload';
import { Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { timeDrain } from './drain';

/** The log is keyed over this many accounts; the write pair keeps one field per account. */
const KEYS = 1000;
const MAX_SIZE = 500;
/** The simulated call of the I/O pair, standing in for a database round trip. */
const IO_MS = 1;

type Messages = EventrailMessage<BenchPayload>[];
type BatchHandler = (messages: Messages) => Promise<void>;
const BATCH_HANDLER = Symbol('BatchHandler');

/** A user's batch handler class; what it does is injected per run. */
@Injectable()
class BenchBatchConsumer {
  constructor(@Inject(BATCH_HANDLER) private readonly handler: BatchHandler) {}

  @OnEvent(BENCH_EVENT, { group: BENCH_GROUP, batch: { maxSize: MAX_SIZE } })
  handle(messages: Messages): Promise<void> {
    return this.handler(messages);
  }
}

/**
 * What batch handlers are for: the handler writes what it got to a store, and
 * the store's round trip is what costs. The single-message handler does one
 * write per message, an `HSET` of one row (the account's last amount) on a
 * second Redis connection; the batch handler one bulk write per batch, one
 * `HSET` of all its rows, as a multi-row INSERT would be. The other pair: one
 * simulated 1 ms call per batch against one per message. Partitions 1,
 * concurrency 1: the strict-order default.
 */
export function batchHandlers(size: Size): Scenario {
  const quick = size === 'quick';
  const writes = quick ? 2_000 : 20_000;
  const calls = quick ? 300 : 5_000;
  return {
    id: 'batch-handlers',
    title: 'Batch handlers: one bulk write per batch against one write per message',
    metrics: [RATE],
    rounds: quick ? 1 : 3,
    warmup: true,
    variants: [
      {
        id: 'single-write',
        label: 'single handler, one HSET of one row per message',
        events: writes,
        run: (ctx) => run(ctx, writes, 'single', 'write'),
      },
      {
        id: 'batch-write',
        label: `batch handler (maxSize ${MAX_SIZE}), one HSET of all rows per batch`,
        events: writes,
        run: (ctx) => run(ctx, writes, 'batch', 'write'),
      },
      {
        id: 'single-io',
        label: `single handler, a ${IO_MS} ms call per message`,
        events: calls,
        run: (ctx) => run(ctx, calls, 'single', 'io'),
      },
      {
        id: 'batch-io',
        label: `batch handler (maxSize ${MAX_SIZE}), a ${IO_MS} ms call per batch`,
        events: calls,
        run: (ctx) => run(ctx, calls, 'batch', 'io'),
      },
    ],
    targets: [
      { label: 'batch / single, Redis write', variant: 'batch-write', reference: 'single-write', metric: 'rate', atLeast: 2 },
      { label: 'batch / single, 1 ms call', variant: 'batch-io', reference: 'single-io', metric: 'rate', atLeast: 10 },
    ],
  };
}

async function run(ctx: RunContext, events: number, shape: 'single' | 'batch', work: 'write' | 'io'): Promise<Measurement> {
  const countdown = new Countdown(events);
  const store = new Redis(ctx.url);
  const table = `${ctx.prefix}:last-amount`;
  const single = async (message: EventrailMessage<BenchPayload>): Promise<void> => {
    if (work === 'write') await store.hset(table, message.key as string, message.data.amountCents);
    else await sleep(IO_MS);
    countdown.hit();
  };
  const batch: BatchHandler = async (messages) => {
    if (work === 'write') {
      const rows: Array<string | number> = [];
      for (const m of messages) rows.push(m.key as string, m.data.amountCents);
      await store.hset(table, ...rows);
    } else {
      await sleep(IO_MS);
    }
    for (let i = 0; i < messages.length; i++) countdown.hit();
  };
  const app = await createEventrailApp({
    url: ctx.url,
    prefix: ctx.prefix,
    ...(shape === 'single' ? { handler: single } : { providers: [{ provide: BATCH_HANDLER, useValue: batch }, BenchBatchConsumer] }),
  });
  try {
    await fillLog(app, events, KEYS);
    return await timeDrain(ctx, countdown, events, `${shape} handler, ${work}`, () => startConsumers(app));
  } finally {
    await app.close();
    store.disconnect();
  }
}
