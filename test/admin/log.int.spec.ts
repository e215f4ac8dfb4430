import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, InvalidOptionError, LogEntry, NonRetryableError, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { readLogPartitions } from '../../lib/redis/log-meta';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { startRedisServer } from '../support/redis-server';

const handled: number[] = [];
let failing = true;

@Injectable()
class Billing {
  @OnEvent('order.placed', 'billing')
  bill(message: EventrailMessage<{ n: number }>): void {
    if (failing) throw new NonRetryableError(`order ${message.data.n} refused`);
    handled.push(message.data.n);
  }
}

describe('EventrailAdmin: reading the log, following it, dead letters one by one', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext;
  let admin: EventrailAdmin;
  let publisher: EventrailPublisher;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(async () => {
    prefix = uniquePrefix('log');
    handled.length = 0;
    failing = true;
    app = await createApp({ prefix, partitions: 2 }, [Billing]);
    admin = app.get(EventrailAdmin);
    publisher = app.get(EventrailPublisher);
  });
  afterEach(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('pages a partition from an id or a time, filters by event type, and opens one entry', async () => {
    const events = Array.from({ length: 30 }, (_, n) => ({
      event: n % 3 === 0 ? 'order.placed' : 'page.viewed',
      data: { n },
      partition: 1,
    }));
    const published = await publisher.publishMany(events);
    await redis.xadd(new EventrailKeys(prefix, 2).stream(1), '*', 'event', 'broken'); // no data field

    const first = await admin.readLog(1, { count: 10 });
    expect(first.entries.map((e) => (e.data as { n: number }).n)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(first.next).toBe(published[9].offset);
    const rest = await admin.readLog(1, { after: first.next!, count: 100 });
    expect(rest.entries).toHaveLength(21);
    expect(rest.next).toBeNull();
    expect(rest.entries[20]).toMatchObject({ event: null, malformed: 'missing field "data"', fields: ['event', 'broken'] });

    const fromId = await admin.readLog(1, { from: published[25].offset });
    expect(fromId.entries[0]).toMatchObject({
      offset: published[25].offset,
      id: published[25].id,
      event: 'page.viewed',
      key: null,
      partition: 1,
    });
    // A time selects by append time, the stream id's milliseconds (Redis's clock).
    const appendedMs = (offset: string): number => Number(offset.split('-')[0]);
    const since = appendedMs(published[25].offset) + 1;
    const fromTime = await admin.readLog(1, { from: new Date(since) });
    const expected = [...published.map((p) => p.offset), rest.entries[20].offset].filter((o) => appendedMs(o) >= since);
    expect(fromTime.entries.map((e) => e.offset)).toEqual(expected);

    const filtered = await admin.readLog(1, { events: ['order.placed'], count: 4 });
    expect(filtered.entries.map((e) => (e.data as { n: number }).n)).toEqual([0, 3, 6, 9]);
    const filteredRest = await admin.readLog(1, { events: ['order.placed'], after: filtered.next!, count: 100 });
    expect(filteredRest.entries.map((e) => (e.data as { n: number }).n)).toEqual([12, 15, 18, 21, 24, 27]);
    // The scan looked at every entry after the last match: polling goes on from there, not from the match.
    expect(filteredRest).toMatchObject({ next: null, scannedTo: rest.entries[20].offset });
    expect(await admin.readLog(1, { events: ['order.placed'], after: filteredRest.scannedTo! })).toEqual({
      partition: 1,
      entries: [],
      next: null,
      scannedTo: filteredRest.scannedTo,
    });

    expect(await admin.logEntry(1, published[4].offset)).toMatchObject({ id: published[4].id, data: { n: 4 }, malformed: null });
    expect(await admin.logEntry(1, '1-0')).toBeNull();
    await expect(admin.readLog(2)).rejects.toThrow(InvalidOptionError);
    await expect(admin.readLog(0, { from: 'yesterday' })).rejects.toThrow(/from/);
    await expect(admin.readLog(0, { count: 0 })).rejects.toThrow(/count/);

    const stats = await admin.stats();
    expect(stats.partitions[1]).toMatchObject({ length: 31, entriesAdded: 31, lastId: rest.entries[20].offset });
    expect(stats.partitions[0]).toMatchObject({ length: 0, entriesAdded: 0, firstId: null });
    expect(await readLogPartitions(redis, prefix)).toBe(2);
    expect(await readLogPartitions(redis, `${prefix}-none`)).toBeNull();
  });

  it('follows every partition live, filtered by event type, until aborted', async () => {
    await publisher.publish('order.placed', { n: -1 }); // before following: not seen
    const abort = new AbortController();
    const seen: LogEntry[] = [];
    const following = (async () => {
      for await (const entry of admin.follow({ events: ['order.placed'], signal: abort.signal })) seen.push(entry);
    })();
    // The tail starts after the first read of the partitions' ends; publish until it sees one.
    await waitFor(async () => {
      await publisher.publish('order.placed', { n: 0 }, { partition: 0 });
      return seen.length > 0;
    }, 'the tail to see an event');
    const before = seen.length;
    await publisher.publishMany([
      { event: 'order.placed', data: { n: 1 }, partition: 1 },
      { event: 'page.viewed', data: { n: 2 }, partition: 0 },
      { event: 'order.placed', data: { n: 3 }, partition: 0 },
    ]);
    const ns = (entries: LogEntry[]): number[] => entries.map((e) => (e.data as { n: number }).n);
    await waitFor(() => [1, 3].every((n) => ns(seen).includes(n)), 'two more order.placed events');
    expect(seen.map((e) => e.event)).not.toContain('page.viewed');
    expect(seen.map((e) => (e.data as { n: number }).n)).not.toContain(-1);
    // The loop above may have published one n: 0 more that arrives after `before` was taken; it is not what is asserted here.
    expect(new Set(ns(seen.slice(before)).filter((n) => n !== 0))).toEqual(new Set([1, 3]));
    abort.abort();
    await following; // ends instead of hanging
  });

  it('stops following at once on return(), even while a next() waits on an idle log', async () => {
    let listening = false;
    const tail = admin.follow({ onListening: () => (listening = true) });
    const pending = tail.next();
    await waitFor(() => listening, 'the tail to start');
    await tail.return!();
    await expect(pending).resolves.toEqual({ value: undefined, done: true });
    await expect(tail.next()).resolves.toEqual({ value: undefined, done: true });
  });

  it('stops following at once even while Redis is down and a read is queued', async () => {
    const server = await startRedisServer();
    const own = await createApp({ prefix, partitions: 2, redis: server.url });
    try {
      let listening = false;
      const tail = own.get(EventrailAdmin).follow({ onListening: () => (listening = true) });
      const pending = tail.next();
      await waitFor(() => listening, 'the tail to start');
      await server.stop(); // SIGKILL: the blocked read now waits on a reconnecting connection
      await waitFor(() => own.get(EventrailAdmin).connectionStatus() === 'reconnecting', 'the client to notice');
      let returned = false;
      void tail.return!().then(() => (returned = true));
      await waitFor(() => returned, 'return() to settle while Redis is down', 5_000);
      await expect(pending).resolves.toEqual({ value: undefined, done: true });
    } finally {
      await own.close();
      await server.stop();
    }
  });

  it('finds one dead letter, lists newest first, counts, and reports replay progress', async () => {
    await publisher.publishMany([1, 2, 3].map((n) => ({ event: 'order.placed', data: { n } })));
    await waitFor(async () => (await admin.deadLetterCount('billing')) === 3, 'three dead letters');
    const oldest = await admin.deadLetters('billing');
    const newest = await admin.deadLetters('billing', { newestFirst: true, count: 2 });
    expect(newest.map((d) => d.id)).toEqual([oldest[2].id, oldest[1].id]);
    expect((await admin.deadLetters('billing', { newestFirst: true, after: newest[1].id })).map((d) => d.id)).toEqual([oldest[0].id]);
    expect(await admin.deadLetter('billing', oldest[1].id)).toMatchObject({ data: { n: 2 }, error: { message: 'order 2 refused' } });
    expect(await admin.deadLetter('billing', '1-0')).toBeNull();

    failing = false;
    const progress: Array<[number, number | null]> = [];
    expect(await admin.replayDeadLetters('billing', 'all', { onProgress: (done, total) => progress.push([done, total]) })).toBe(3);
    expect(progress).toEqual([[3, 3]]);
    await waitFor(() => handled.length === 3, 'the replayed events handled');
    expect(await admin.deadLetterCount('billing')).toBe(0);
  });
});
