import { Injectable, INestApplicationContext } from '@nestjs/common';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import Redis from 'ioredis';
import { z } from 'zod';
import {
  defineEvent,
  EventData,
  EventrailAdmin,
  EventrailConsumers,
  EventrailMessage,
  EventrailPublisher,
  EventValidationError,
  InvalidHandlerError,
  OnEvent,
} from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const OrderPlaced = defineEvent(
  'order.placed',
  z.object({
    orderId: z.string(),
    cents: z.number().int().positive(),
    // Transforms and defaults: the wire carries the input, handlers get the output.
    placedAt: z.string().transform((text) => new Date(text)),
    channel: z.enum(['web', 'shop']).default('web'),
  }),
);

/** An asynchronous Standard Schema (validate returns a promise), written by hand: what an async-refined or remote schema does. */
const asyncNumber: StandardSchemaV1<{ n: number }> = {
  '~standard': {
    version: 1,
    vendor: 'test',
    validate: async (value) => {
      await Promise.resolve();
      const n = (value as { n?: unknown } | null)?.n;
      return typeof n === 'number' ? { value: { n } } : { issues: [{ message: 'must be a number', path: ['n'] }] };
    },
  },
};
const Counted = defineEvent('counted', asyncNumber);

const seen = { orders: [] as EventrailMessage<EventData<typeof OrderPlaced>>[], byName: [] as unknown[], counted: [] as unknown[] };

@Injectable()
class Billing {
  @OnEvent(OrderPlaced, 'billing')
  charge(message: EventrailMessage<EventData<typeof OrderPlaced>>): void {
    seen.orders.push(message);
  }

  // Declared by name in the same group: it shares the definition's schema, and gets the parsed data.
  @OnEvent('order.placed', 'billing')
  audit(message: EventrailMessage): void {
    seen.byName.push(message.data);
  }

  @OnEvent(Counted, { group: 'billing' })
  count(message: EventrailMessage<{ n: number }>): void {
    seen.counted.push(message.data.n);
  }
}

/** A group that takes the same event by name only: no schema, no check. */
@Injectable()
class Archive {
  readonly raw: unknown[] = [];

  @OnEvent('order.placed', 'archive')
  keep(message: EventrailMessage): void {
    this.raw.push(message.data);
  }
}

const OtherOrderPlaced = defineEvent('order.placed', z.object({ orderId: z.number() }));

@Injectable()
class Clashing {
  @OnEvent(OtherOrderPlaced, 'billing')
  charge(): void {}
}

const valid = (orderId: string) => ({ orderId, cents: 1250, placedAt: '2026-01-02T03:04:05.000Z' });

describe('typed events', () => {
  const prefix = uniquePrefix('typed');
  const keys = new EventrailKeys(prefix, 1);
  let app: INestApplicationContext;
  let redis: Redis;
  let publisher: EventrailPublisher;

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    app = await createApp({ prefix }, [Billing, Archive]);
    publisher = app.get(EventrailPublisher);
  });

  afterAll(async () => {
    await app?.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it("publishes valid data as given and hands handlers the schema's output", async () => {
    const result = await publisher.publish(OrderPlaced, valid('o1'), { key: 'o1' });
    await waitFor(() => seen.orders.length === 1 && seen.byName.length === 1, 'the typed handlers');
    expect(seen.orders[0].data).toEqual({ orderId: 'o1', cents: 1250, placedAt: new Date('2026-01-02T03:04:05.000Z'), channel: 'web' });
    expect(seen.orders[0].event).toBe('order.placed');
    expect(seen.byName[0]).toEqual(seen.orders[0].data);
    // The log holds the data as published (the schema's input); the group without the schema gets that.
    const [[, fields]] = await redis.xrange(keys.stream(0), result.offset, result.offset);
    expect(JSON.parse(fields[fields.indexOf('data') + 1])).toEqual(valid('o1'));
    const archive = app.get(Archive);
    await waitFor(() => archive.raw.length === 1, 'the archive group');
    expect(archive.raw[0]).toEqual(valid('o1'));
  });

  it('refuses data that fails the schema before anything is sent, listing the issues by path', async () => {
    const before = await redis.xlen(keys.stream(0));
    const bad = { orderId: 7, cents: -1, placedAt: '2026-01-02' };
    const refused = publisher.publish(OrderPlaced, bad as never);
    await expect(refused).rejects.toBeInstanceOf(EventValidationError);
    await expect(refused).rejects.toThrow(
      'Event "order.placed": data does not match the event\'s schema: ' +
        'orderId: Invalid input: expected string, received number; cents: Too small: expected number to be >0',
    );
    const batch = publisher.publishMany([
      { event: OrderPlaced, data: valid('o2') },
      { event: 'untyped', data: { anything: true } },
      // @ts-expect-error the compiler refuses it too; a caller without types is refused at run time
      { event: OrderPlaced, data: { ...valid('o3'), channel: 'phone' } },
    ]);
    await expect(batch).rejects.toMatchObject({ name: 'EventValidationError', index: 2, issues: [{ path: 'channel' }] });
    await expect(batch).rejects.toThrow(/^events\[2\] \("order.placed"\): data does not match/);
    await expect(publisher.publish(Counted, { n: 'x' } as never)).rejects.toThrow(
      'Event "counted": data does not match the event\'s schema: n: must be a number',
    );
    expect(await redis.xlen(keys.stream(0))).toBe(before);
  });

  it('works with an asynchronous schema on both sides', async () => {
    await publisher.publishMany([
      { event: Counted, data: { n: 1 } },
      { event: Counted, data: { n: 2 } },
    ]);
    await waitFor(() => seen.counted.length === 2, 'both counted events');
    expect(seen.counted).toEqual([1, 2]);
  });

  it('dead-letters an entry that fails the schema at once, as `invalid` with the issues, and goes on', async () => {
    // What a producer in another language could append: one XADD, data that does not match.
    await redis.xadd(keys.stream(0), '*', 'event', 'order.placed', 'data', JSON.stringify({ orderId: 'o4', cents: 'many' }));
    await redis.xadd(keys.stream(0), '*', 'event', 'counted', 'data', JSON.stringify({ n: null }));
    const after = await publisher.publish(OrderPlaced, valid('o5'));
    await waitFor(() => seen.orders.some((m) => m.data.orderId === 'o5'), 'the event after the invalid ones');
    await waitFor(async () => (await redis.get(keys.offset('billing', 0))) === after.offset, 'the commit past them');

    const letters = await app.get(EventrailAdmin).deadLetters('billing');
    expect(letters.map((l) => [l.reason, l.event, l.error.name, l.attempts])).toEqual([
      ['invalid', 'order.placed', 'EventValidationError', 0],
      ['invalid', 'counted', 'EventValidationError', 0],
    ]);
    expect(letters[0].issues).toEqual([
      { path: 'cents', message: 'Invalid input: expected number, received string' },
      { path: 'placedAt', message: 'Invalid input: expected string, received undefined' },
    ]);
    expect(letters[0].error.message).toContain('cents: Invalid input: expected number, received string');
    expect(letters[1].issues).toEqual([{ path: 'n', message: 'must be a number' }]);
    // Neither handler of the event ran for it; the group without a schema handled it as it came.
    expect(seen.orders.map((m) => m.data.orderId)).toEqual(['o1', 'o5']);
    expect(seen.byName).toHaveLength(2);
    expect(await app.get(EventrailAdmin).deadLetters('archive')).toEqual([]);
    expect(app.get(EventrailConsumers).stats().billing.deadLettered).toBe(2);

    // A replay runs the schema again: with the same schema, both come back as dead letters.
    expect(await app.get(EventrailAdmin).replayDeadLetters('billing', 'all')).toBe(2);
    await app.get(EventrailConsumers).settled();
    const again = await app.get(EventrailAdmin).deadLetters('billing');
    expect(again.map((l) => [l.reason, l.event])).toEqual([
      ['invalid', 'order.placed'],
      ['invalid', 'counted'],
    ]);
    expect(seen.orders.map((m) => m.data.orderId)).toEqual(['o1', 'o5']);
  });

  it('refuses two different schemas for one event in one group at startup', async () => {
    const started = createApp({ prefix: uniquePrefix('typed-clash') }, [Billing, Clashing]);
    await expect(started).rejects.toBeInstanceOf(InvalidHandlerError);
    await expect(started).rejects.toThrow(
      '@OnEvent on Clashing.charge: event "order.placed" already has another schema in group "billing" (from Billing.charge); ' +
        'handlers of one event in one group must share one defineEvent',
    );
  });
});
