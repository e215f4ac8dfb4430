import { INestApplicationContext } from '@nestjs/common';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import Redis from 'ioredis';
import { defineEvent, EventrailPublisher, EventValidationError } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { readEntry } from '../../lib/wire/codec';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';
import { seededRandom } from '../support/seeded-random';

/** How a generated schema answers: at once, after some microtasks, or after a timer of up to 3 ms. */
type Timing = { kind: 'sync' } | { kind: 'microtasks'; hops: number } | { kind: 'timer'; ms: number };

/** A Standard Schema that accepts `{ ok: true }` and refuses anything else, answering with `timing` (read from the data). */
const timedSchema: StandardSchemaV1<{ ok: boolean; timing: Timing }> = {
  '~standard': {
    version: 1,
    vendor: 'test',
    validate: (value) => {
      const { ok, timing } = value as { ok: boolean; timing: Timing };
      const result = ok ? { value: value as { ok: boolean; timing: Timing } } : { issues: [{ message: 'refused on purpose' }] };
      if (timing.kind === 'sync') return result;
      if (timing.kind === 'microtasks') {
        let settled = Promise.resolve();
        for (let i = 0; i < timing.hops; i++) settled = settled.then(() => undefined);
        return settled.then(() => result);
      }
      return new Promise((resolve) => setTimeout(() => resolve(result), timing.ms));
    },
  },
};
const Step = defineEvent('order.step', timedSchema);

interface Call {
  seq: number;
  ok: boolean;
  timing: Timing;
  /** A plain name (no schema) instead of the definition, or in a publishMany of two. */
  how: 'definition' | 'name' | 'many';
}

function generate(seed: number): Call[] {
  const random = seededRandom(seed);
  const length = 3 + Math.floor(random() * 12);
  return Array.from({ length }, (_, seq) => {
    const roll = random();
    const timing: Timing =
      roll < 0.35
        ? { kind: 'sync' }
        : roll < 0.65
          ? { kind: 'microtasks', hops: Math.floor(random() * 6) }
          : { kind: 'timer', ms: Math.floor(random() * 4) };
    const how = random() < 0.7 ? 'definition' : random() < 0.5 ? 'name' : 'many';
    return { seq, ok: random() > 0.15, timing, how };
  });
}

describe('publish keeps call order when schemas answer asynchronously', () => {
  const prefix = uniquePrefix('call-order');
  const keys = new EventrailKeys(prefix, 1);
  let app: INestApplicationContext;
  let publisher: EventrailPublisher;
  let redis: Redis;

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    app = await createApp({ prefix, partitions: 1 });
    publisher = app.get(EventrailPublisher);
  });

  afterAll(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('lands placed, paid, shipped in call order when only the first has an asynchronous schema', async () => {
    await redis.del(keys.stream(0));
    const Placed = defineEvent('order.placed', timedSchema);
    await Promise.all([
      publisher.publish(Placed, { ok: true, timing: { kind: 'timer', ms: 2 } }, { key: 'order-1' }),
      publisher.publish('order.paid', {}, { key: 'order-1' }),
      publisher.publish('order.shipped', {}, { key: 'order-1' }),
    ]);
    const entries = await redis.xrange(keys.stream(0), '-', '+');
    const events = entries.map(
      ([offset, fields]) => (readEntry(offset, fields, { partition: 0, logTag: keys.logTag }) as { event: string }).event,
    );
    expect(events).toEqual(['order.placed', 'order.paid', 'order.shipped']);
  });

  it('over 200 generated sequences of one key: every accepted call lands in call order, every refused one is rejected and absent', async () => {
    for (let seed = 1; seed <= 200; seed++) {
      await redis.del(keys.stream(0));
      const calls = generate(seed);
      const outcomes = await Promise.allSettled(
        calls.map((call) => {
          const data = { ok: call.ok, timing: call.timing, seq: call.seq };
          const options = { key: 'order-1', id: `call-${call.seq}` };
          // A plain name has no schema: it is accepted even where `ok` is false.
          if (call.how === 'name') return publisher.publish('order.step', data, options);
          if (call.how === 'many') return publisher.publishMany([{ event: Step, data, ...options }]);
          return publisher.publish(Step, data, options);
        }),
      );
      const accepted = calls.filter((call) => call.ok || call.how === 'name').map((call) => `call-${call.seq}`);
      const entries = await redis.xrange(keys.stream(0), '-', '+');
      const landed = entries.map(
        ([offset, fields]) => (readEntry(offset, fields, { partition: 0, logTag: keys.logTag }) as { id: string }).id,
      );
      const context = `seed ${seed}: ${JSON.stringify(calls)}`;
      expect({ context, landed }).toEqual({ context, landed: accepted });
      calls.forEach((call, i) => {
        const outcome = outcomes[i];
        if (call.ok || call.how === 'name')
          expect({ context, seq: call.seq, status: outcome.status }).toEqual({ context, seq: call.seq, status: 'fulfilled' });
        else
          expect({ context, seq: call.seq, reason: (outcome as PromiseRejectedResult).reason }).toMatchObject({
            reason: expect.any(EventValidationError),
          });
      });
    }
  });
});
