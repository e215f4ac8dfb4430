import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailPublisher, InvalidEventDataError, PayloadTooLargeError, PublishManyError } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

/**
 * Data whose JSON.stringify gives no string or throws an eventrail error of another kind, where
 * `publish` and `publishMany` must still refuse typed (InvalidEventDataError), and a `publishMany`
 * refused after runs left must say exactly what was appended (no `unknown`: nothing was sent for them).
 *
 * Was broken (fixed in the publisher: no JSON is an InvalidEventDataError, anything thrown while a run is built is not-appended). Measured on the code of efc6565 (with the toJSON bound of validate-event.ts fixed):
 * - a non-enumerable toJSON that answers undefined: publish and publishMany reject with a TypeError
 *   ("Cannot read properties of undefined (reading 'length')", from the publisher's `serialised`),
 *   nothing appended;
 * - a proxy whose toJSON trap answers such a function from its second read, at event 299 of 300 in
 *   one partition: PublishManyError, 256 appended and 44 `unknown`, its cause that TypeError;
 * - a getter that throws an InvalidEventNameError (an eventrail check it calls) at its second read:
 *   PublishManyError, 256 appended and 44 `unknown`, its cause that error.
 */
describe('publish and publishMany, data that serialises to nothing or throws an eventrail error', () => {
  const prefix = uniquePrefix('untyped');
  const keys = new EventrailKeys(prefix, 1);
  let app: INestApplicationContext;
  let publisher: EventrailPublisher;
  let redis: Redis;

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    app = await createApp({ prefix, partitions: 1, maxPayloadBytes: 4000 });
    publisher = app.get(EventrailPublisher);
    await publisher.publishMany([
      { event: 'warm', data: 1 },
      { event: 'warm', data: 2 },
    ]);
  });
  afterAll(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  const settle = (call: Promise<unknown>): Promise<unknown> =>
    call.then(
      () => 'appended',
      (error: unknown) => error,
    );
  const named = (error: unknown): string =>
    error instanceof Error ? `${error.constructor.name}: ${error.message.slice(0, 120)}` : String(error);

  it('refuses typed, with nothing appended, data whose toJSON answers undefined (publish, and publishMany wherever it is)', async () => {
    const nothing = (): object => Object.defineProperty({ a: 1 }, 'toJSON', { value: () => undefined });
    const found: string[] = [];
    const before = await redis.xlen(keys.stream(0));
    const lone = await settle(publisher.publish('untyped.one', nothing()));
    if (!(lone instanceof InvalidEventDataError)) found.push(`publish: ${named(lone)}`);
    for (const at of [0, 299]) {
      const batch = Array.from({ length: 300 }, (_, i) => ({ event: 'untyped.many', data: i === at ? nothing() : { i } }));
      const outcome = await settle(publisher.publishMany(batch));
      if (!(outcome instanceof InvalidEventDataError)) found.push(`publishMany at ${at}: ${named(outcome)}`);
    }
    expect(found).toEqual([]);
    expect(await redis.xlen(keys.stream(0))).toBe(before);
  });

  it('refused after runs left, says appended or not-appended for every event, as the stream does, with a typed cause', async () => {
    const proxyToJSON = (): object => {
      let reads = 0;
      return new Proxy({ a: 1 }, { get: (target, name) => (name === 'toJSON' ? (++reads > 1 ? () => undefined : undefined) : target.a) });
    };
    const throwsEventrail = (): object => {
      let reads = 0;
      return Object.defineProperty({}, 'v', {
        enumerable: true,
        get: () => {
          // A getter that runs an eventrail check of its own, which refuses.
          if (++reads > 1) publisher.check('', {});
          return 'v';
        },
      });
    };
    const found: string[] = [];
    for (const [name, make] of [
      ['proxy toJSON', proxyToJSON],
      ['eventrail error', throwsEventrail],
    ] as Array<[string, () => object]>) {
      const before = await redis.xlen(keys.stream(0));
      const batch = Array.from({ length: 300 }, (_, i) => ({ event: 'untyped.midway', data: i === 299 ? make() : { i } }));
      const outcome = await settle(publisher.publishMany(batch));
      const landed = (await redis.xlen(keys.stream(0))) - before;
      if (!(outcome instanceof PublishManyError)) {
        found.push(`${name}: ${named(outcome)}, ${landed} appended`);
        continue;
      }
      const appended = outcome.outcomes.filter((o) => o === 'appended').length;
      const unknown = outcome.outcomes.filter((o) => o === 'unknown').length;
      const typed = outcome.cause instanceof InvalidEventDataError || outcome.cause instanceof PayloadTooLargeError;
      if (unknown > 0 || appended !== landed || !typed)
        found.push(`${name}: ${appended} appended, ${unknown} unknown, ${landed} in the stream, cause ${named(outcome.cause)}`);
    }
    expect(found).toEqual([]);
  });
});
