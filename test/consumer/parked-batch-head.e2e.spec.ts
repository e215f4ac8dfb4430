/**
 * With a batch handler, a parked line's next head (not tried yet) that keeps failing is dead-lettered
 * once it has failed for `redelivery.maxAgeMs`, like any head: its redelivery, a one-message batch, does
 * not find it parked behind its own line.
 */
import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { key: string; n: number };

const dependency = {
  down: new Set<string>(),
  calls: [] as string[],
  handled: [] as string[],
  call(message: EventrailMessage<Data>): void {
    const name = `${message.data.key}${message.data.n}`;
    this.calls.push(name);
    if (this.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    this.handled.push(name);
  },
};

@Injectable()
class ShortBudgetBatch {
  @OnEvent('account.changed', {
    group: 'batch-age',
    ordering: 'key',
    lockTtlMs: 2_000,
    heartbeatTtlMs: 2_000,
    maxRetries: 0,
    retryBackoffMs: 5,
    redelivery: { delayMs: 20, factor: 1, maxDelayMs: 20, maxAgeMs: 300 },
    batch: { maxSize: 10 },
  })
  handle(messages: EventrailMessage<Data>[]): void {
    for (const message of messages) dependency.call(message);
  }
}

describe('parked keys with a batch handler: maxAgeMs bounds every head of a line', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;
  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked-batch-head');
    Object.assign(dependency, { down: new Set(), calls: [], handled: [] });
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('a key that stays down has each of its messages dead-lettered after maxAgeMs, head after head', async () => {
    app = await createApp({ prefix }, [ShortBudgetBatch]);
    const admin = app.get(EventrailAdmin);
    dependency.down.add('A');
    const published = await app
      .get(EventrailPublisher)
      .publishMany(
        ['A1', 'A2', 'A3', 'B1'].map((name) => ({ event: 'account.changed', data: { key: name[0], n: Number(name[1]) }, key: name[0] })),
      );
    // Three heads of 300 ms each. A wait for the condition, not a 6 s deadline (a loaded host can take longer);
    // on a timeout the check below says what was dead-lettered and what is still parked.
    await waitFor(
      async () => (await admin.deadLetterCount('batch-age')) >= 3 && dependency.handled.includes('B1'),
      'three heads dead-lettered and B1 handled',
    ).catch(() => undefined);
    const parked = await admin.parkedKeys('batch-age');
    expect({
      deadLettered: (await admin.deadLetters('batch-age')).map((letter) => letter.eventId).sort(),
      parked: parked.map((line) => ({ key: line.key, count: line.count, attempts: line.attempts })),
    }).toEqual({
      deadLettered: published
        .slice(0, 3)
        .map((r) => r.id)
        .sort(),
      parked: [],
    });
    expect(dependency.handled).toEqual(['B1']);
  });
});
