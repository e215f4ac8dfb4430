import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const calls: number[] = [];

@Injectable()
class Unordered {
  @OnEvent('job.run', { group: 'jobs', ordering: 'unordered', enableIdempotency: true })
  run(message: EventrailMessage<{ n: number }>): void {
    calls.push(message.data.n);
  }
}

/**
 * A parked line is stored with the commit that parks its message, and that
 * commit may leave the offset before it (an earlier message was still
 * running). The next owner's fetch then reads the parked message again: it
 * is its line's to redeliver. With `'unordered'` ordering the fetch handled
 * it as well, so it ran twice, once after its done-mark was committed (soak
 * seed 70026: 8 ms after).
 */
describe("'unordered': a parked message read again by the next owner's fetch", () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;

  beforeEach(() => {
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('reread');
    calls.length = 0;
  });

  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('is left to its line: not handled by the fetch while its redelivery waits, and handled once when retried', async () => {
    app = await createApp({ prefix, partitions: 1, autoStart: false }, [Unordered]);
    const published = await app
      .get(EventrailPublisher)
      .publishMany([1, 2, 3].map((n) => ({ event: 'job.run', data: { n }, key: `k${n}` })));
    // As a previous owner left it: message 2 parked (its redelivery ten minutes away), the offset still before message 1.
    const keys = new EventrailKeys(prefix, 1);
    const now = Date.now();
    const line = {
      ids: [published[1].offset],
      k: 'k2',
      a: 1,
      f: now,
      n: now + 600_000,
      e: 'Error: down',
      t: published[1].offset,
      r: 0,
      c: 0,
    };
    await redis.hset(keys.recovery('jobs', 0), `park:m:${published[1].offset}`, JSON.stringify(line), 'parkedFloor', published[1].offset);

    await app.get(EventrailConsumers).start();
    await waitFor(() => calls.includes(1) && calls.includes(3), 'messages 1 and 3 handled');
    const admin = app.get(EventrailAdmin);
    await waitFor(async () => (await admin.group('jobs')).partitions[0].committed === published[2].offset, 'the offset past message 3');
    expect(calls.filter((n) => n === 2)).toEqual([]);
    expect((await admin.parkedKeys('jobs')).map((p) => p.eventId)).toEqual([published[1].id]);

    await admin.retryParked('jobs');
    await waitFor(async () => (await admin.parkedKeys('jobs')).length === 0, 'the line released after its retry');
    expect(calls.filter((n) => n === 2)).toEqual([2]);
  });
});
