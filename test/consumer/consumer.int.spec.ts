import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailModuleOptions, EventrailPublisher, NonRetryableError, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

/** What the handlers below saw; reset per test. */
const record = {
  handled: [] as EventrailMessage[],
  second: [] as string[],
  failUntilAttempt: new Map<number, number>(),
  nonRetryable: new Set<number>(),
  inFlight: new Map<string, number>(),
  overlaps: 0,
  delayMs: 0,
};

type Data = { n: number };

@Injectable()
class Worker {
  @OnEvent(['job.run', 'job.other'], { group: 'workers', maxRetries: 2, retryBackoffMs: 5, retryBackoffMaxMs: 20 })
  async handle(message: EventrailMessage<Data>): Promise<void> {
    const key = message.key ?? '';
    const running = (record.inFlight.get(key) ?? 0) + 1;
    record.inFlight.set(key, running);
    if (running > 1) record.overlaps++;
    try {
      if (record.delayMs) await new Promise((resolve) => setTimeout(resolve, Math.random() * record.delayMs));
      if (record.nonRetryable.has(message.data.n)) throw new NonRetryableError(`bad job ${message.data.n}`);
      if (message.attempt < (record.failUntilAttempt.get(message.data.n) ?? 0)) throw new Error(`flaky ${message.data.n}`);
      record.handled.push(message);
    } finally {
      record.inFlight.set(key, (record.inFlight.get(key) ?? 1) - 1);
    }
  }

  /** A second method on the same event and group: the message is done when both succeed. */
  @OnEvent('job.run', 'workers')
  also(message: EventrailMessage<Data>): void {
    record.second.push(message.id);
  }
}

describe('consumer runtime', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];

  const start = async (options: EventrailModuleOptions = {}): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, ...options }, [Worker]);
    apps.push(app);
    return app;
  };
  const offsetOf = (partition = 0): Promise<string | null> => redis.get(keys.offset('workers', partition));
  const ns = (): number[] => record.handled.map((m) => (m.data as Data).n);

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('cons');
    keys = new EventrailKeys(prefix, 1);
    Object.assign(record, {
      handled: [],
      second: [],
      failUntilAttempt: new Map(),
      nonRetryable: new Set(),
      inFlight: new Map(),
      overlaps: 0,
      delayMs: 0,
    });
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('hands every message to every method of the group and fills in the message fields', async () => {
    const app = await start();
    const published = await app.get(EventrailPublisher).publish('job.run', { n: 1 }, { key: 'k', headers: { traceparent: 't1' } });
    await waitFor(() => record.handled.length === 1 && record.second.length === 1, 'both methods called');
    const [message] = record.handled;
    expect(message).toMatchObject({
      id: published.id,
      event: 'job.run',
      data: { n: 1 },
      key: 'k',
      headers: { traceparent: 't1' },
      partition: 0,
      offset: published.offset,
      group: 'workers',
      attempt: 1,
    });
    expect(message.publishedAt).toBeInstanceOf(Date);
    expect(record.second).toEqual([published.id]);
    await waitFor(async () => (await offsetOf()) === published.offset, 'offset committed');
  });

  it('skips events the group has no handler for, without calling anything, and commits past them', async () => {
    const app = await start();
    const publisher = app.get(EventrailPublisher);
    await publisher.publish('unrelated', { n: 0 });
    const last = await publisher.publish('job.other', { n: 2 });
    await publisher.publish('unrelated.too', { n: 3 });
    const end = await publisher.publish('unrelated.too', { n: 4 });
    await waitFor(async () => (await offsetOf()) === end.offset, 'offset past the skipped events');
    expect(ns()).toEqual([2]);
    expect(record.handled[0].id).toBe(last.id);
    expect(await redis.smembers(keys.events('workers'))).toEqual(expect.arrayContaining(['job.run', 'job.other']));
  });

  it('retries a failing handler in place, then gives up and moves on; NonRetryableError gives up at once', async () => {
    const app = await start({ consumer: { ordering: 'partition' } });
    record.failUntilAttempt.set(1, 3); // succeeds on attempt 3 (maxRetries 2)
    record.failUntilAttempt.set(2, 99); // never succeeds
    record.nonRetryable.add(3);
    const publisher = app.get(EventrailPublisher);
    await publisher.publishMany([1, 2, 3, 4].map((n) => ({ event: 'job.other', data: { n } })));
    await waitFor(() => ns().includes(4), 'the event after the failures handled');
    expect(ns()).toEqual([1, 4]);
    expect(record.handled[0].attempt).toBe(3);
  });

  it('resumes from the committed offset after a restart', async () => {
    const app = await start();
    const publisher = app.get(EventrailPublisher);
    await publisher.publishMany([1, 2, 3].map((n) => ({ event: 'job.other', data: { n } })));
    await waitFor(() => record.handled.length === 3, 'first three handled');
    const committed = record.handled[2].offset;
    await waitFor(async () => (await offsetOf()) === committed, 'first three committed');
    await app.close();
    apps = [];
    await redis.xadd(keys.stream(0), '*', 'event', 'job.other', 'data', '{"n":4}');
    await start();
    await waitFor(() => record.handled.length === 4, 'the fourth handled after restart');
    expect(ns()).toEqual([1, 2, 3, 4]);
  });

  it('applies initialOffset only when the group has no committed offset', async () => {
    const log = keys.stream(0);
    for (const [id, n] of [
      ['1000-0', 1],
      ['2000-0', 2],
      ['2000-1', 3],
      ['3000-0', 4],
    ] as const) {
      await redis.xadd(log, id, 'event', 'job.other', 'data', JSON.stringify({ n }));
    }
    for (const [initialOffset, expected] of [
      [{ mode: 'fromStart' }, [1, 2, 3, 4]],
      [{ mode: 'fromId', id: '2000-1' }, [3, 4]],
      [{ mode: 'fromTime', time: new Date(2000) }, [2, 3, 4]],
    ] as const) {
      await redis.del(keys.offset('workers', 0));
      record.handled = [];
      const app = await start({ consumer: { initialOffset } });
      await waitFor(async () => (await offsetOf()) === '3000-0', `${initialOffset.mode}: committed to the end`);
      expect({ mode: initialOffset.mode, handled: ns() }).toEqual({ mode: initialOffset.mode, handled: expected });
      await app.close();
      apps = [];
    }

    // fromEnd: only what is published after the group first starts.
    await redis.del(keys.offset('workers', 0));
    record.handled = [];
    const app = await start({ consumer: { initialOffset: { mode: 'fromEnd' } } });
    expect(await offsetOf()).toBe('3000-0');
    await app.get(EventrailPublisher).publish('job.other', { n: 5 });
    await waitFor(() => ns().includes(5), 'new event handled');
    expect(ns()).toEqual([5]);
    await app.close();
    apps = [];

    // Once committed, the offset wins over initialOffset.
    record.handled = [];
    await redis.xadd(log, '*', 'event', 'job.other', 'data', '{"n":6}');
    await start({ consumer: { initialOffset: { mode: 'fromStart' } } });
    await waitFor(() => ns().includes(6), 'resumed');
    expect(ns()).toEqual([6]);
  });

  it('with concurrency > 1 runs different keys side by side but never two of the same key, in order', async () => {
    record.delayMs = 3;
    const app = await start({ groups: { workers: { concurrency: 8, batchSize: 50 } } });
    const events = Array.from({ length: 200 }, (_, n) => ({ event: 'job.other', data: { n }, key: `key-${n % 10}` }));
    await app.get(EventrailPublisher).publishMany(events);
    await waitFor(
      () => record.handled.length === 200,
      () => `handled ${record.handled.length}`,
    );
    expect(record.overlaps).toBe(0);
    for (let k = 0; k < 10; k++) {
      const order = record.handled.filter((m) => m.key === `key-${k}`).map((m) => (m.data as Data).n);
      expect(order).toEqual([...order].sort((a, b) => a - b));
    }
  });

  it('with autoStart: false consumes nothing until EventrailConsumers.start()', async () => {
    const app = await start({ autoStart: false });
    const consumers = app.get(EventrailConsumers);
    const published = await app.get(EventrailPublisher).publish('job.other', { n: 1 });
    expect(consumers.isRunning).toBe(false);
    expect(await redis.zcard(keys.members('workers'))).toBe(0);
    expect(await offsetOf()).toBeNull();
    await consumers.start();
    expect(consumers.ownership()).toEqual({ workers: [0] });
    await waitFor(async () => (await offsetOf()) === published.offset, 'handled after start');
    expect(ns()).toEqual([1]);
  });

  it('never lets a malformed entry stop the group', async () => {
    const app = await start();
    await redis.xadd(keys.stream(0), '*', 'event', 'job.other', 'data', '{broken');
    await redis.xadd(keys.stream(0), '*', 'data', '{}');
    await app.get(EventrailPublisher).publish('job.other', { n: 9 });
    await waitFor(() => ns().includes(9), 'the valid event after malformed ones');
    expect(ns()).toEqual([9]);
  });
});
