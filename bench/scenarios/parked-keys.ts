import type { Ordering } from '../../lib';
import { Countdown } from '../support/countdown';
import { createEventrailApp, fillLog, startConsumers } from '../support/eventrail-app';
import { keyOf } from '../support/payload';
import { Measurement, RATE, RunContext, Scenario, Size } from '../support/scenario';
import { timeDrain } from './drain';

/** The log is keyed over this many keys, on one partition; one of them fails. */
const KEYS = 1000;
const FAILING_KEY = keyOf(0, KEYS);

/**
 * Failure isolation: one key among 1000 on one partition fails for a while
 * (its handler throws until then), the others succeed. The rate is that of
 * the other keys' events: how long the group takes to handle all of them.
 * With `ordering: 'key'` the failing key is parked at its first failure
 * (its quick retries are redeliveries) and the others go on; with `'partition'` (retries in place with
 * their default budget) the partition waits for it. The reference is the
 * same drain with no failing key. Partitions 1, concurrency 1.
 */
export function parkedKeys(size: Size): Scenario {
  const quick = size === 'quick';
  const events = quick ? 5_000 : 200_000;
  // Long enough to cover the other keys' whole drain (under a second here), short enough for 7 rounds of 'partition'.
  const failForMs = quick ? 2_000 : 10_000;
  const others = events - Math.ceil(events / KEYS);
  return {
    id: 'parked-keys',
    title: `Failure isolation: one key of ${KEYS} failing for ${failForMs / 1000} s on one partition`,
    metrics: [RATE],
    // A drain of under a second scatters by ±15 % from round to round: 2 rounds judged noise (0.85 on 2026-12-04, 0.96 over 7).
    rounds: quick ? 1 : 7,
    warmup: false,
    variants: [
      { id: 'none-failing', label: "ordering 'key', no key failing", events: others, run: (ctx) => run(ctx, events, 'key', 0) },
      {
        id: 'key',
        label: "ordering 'key', one key failing",
        events: others,
        run: (ctx) => run(ctx, events, 'key', failForMs),
      },
      {
        id: 'partition',
        label: "ordering 'partition', one key failing",
        events: others,
        run: (ctx) => run(ctx, events, 'partition', failForMs),
      },
    ],
    targets: [
      {
        label: "other keys, one failing / none failing, ordering 'key'",
        variant: 'key',
        reference: 'none-failing',
        metric: 'rate',
        atLeast: 0.9,
      },
    ],
  };
}

async function run(ctx: RunContext, events: number, ordering: Ordering, failForMs: number): Promise<Measurement> {
  const others = events - Math.ceil(events / KEYS);
  const countdown = new Countdown(others);
  let failUntil = 0;
  const app = await createEventrailApp({
    url: ctx.url,
    prefix: ctx.prefix,
    // The default budgets in place: a minute of retries for 'partition', so it holds the key's whole outage.
    consumer: ordering === 'partition' ? { ordering, maxRetries: 8 } : { ordering },
    handler: (message) => {
      if (message.key !== FAILING_KEY) return countdown.hit();
      if (Date.now() < failUntil) throw new Error(`${FAILING_KEY} is down`);
    },
  });
  try {
    await fillLog(app, events, KEYS);
    return await timeDrain(ctx, countdown, others, `other keys, ordering ${ordering}`, () => {
      if (failForMs > 0) failUntil = Date.now() + failForMs;
      return startConsumers(app);
    });
  } finally {
    await app.close();
  }
}
