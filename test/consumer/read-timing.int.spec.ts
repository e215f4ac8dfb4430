import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

/**
 * When a partition worker sends its next read. Caught up, the read it would send while a fetch is handled
 * would only wait at Redis for the next append, and its socket write would sit between the fetch's entries
 * (an async handler's first await lets it out): it is sent once the fetch is handled. So while a handler
 * of a caught-up fetch runs, no read of the worker is blocked at Redis; once the fetch is done, one is, and
 * an event published then is handled at once, also after a failure retried in place. Only for a fetch of
 * one or two entries: a longer caught-up fetch sends its read first, as a worker that is behind does.
 */

let probe: Redis;
const seen: Array<{ n: number; blockedReads: number }> = [];
const failOnce = new Set<number>();

function blockedClients(info: string): number {
  return Number(/^blocked_clients:(\d+)/m.exec(info)?.[1] ?? NaN);
}

@Injectable()
class Watcher {
  @OnEvent('timed', 'watch')
  async handle(message: EventrailMessage<{ n: number }>): Promise<void> {
    // A few round trips on another connection: a read written before this handler started has reached Redis
    // and blocked there by the last of them.
    let blockedReads = 0;
    for (let i = 0; i < 5; i++) blockedReads = Math.max(blockedReads, blockedClients(await probe.info('clients')));
    seen.push({ n: message.data.n, blockedReads });
    if (failOnce.delete(message.data.n)) throw new Error(`event ${message.data.n} fails once`);
  }
}

describe('when a partition worker reads', () => {
  // A Redis of its own: blocked_clients counts only this app's one worker.
  let server: RedisServer;
  let app: INestApplicationContext;
  let publisher: EventrailPublisher;

  beforeAll(async () => {
    server = await startRedisServer();
    probe = new Redis(server.url);
    app = await createApp(
      { redis: server.url, prefix: 'read-timing', partitions: 1, consumer: { retryBackoffMs: 10, retryBackoffMaxMs: 20 } },
      [Watcher],
    );
    publisher = app.get(EventrailPublisher);
    const consumers = app.get(EventrailConsumers);
    await waitFor(() => consumers.ownership().watch?.length === 1, 'the partition owned');
    await waitFor(async () => blockedClients(await probe.info('clients')) === 1, 'the worker blocked in its read');
  });
  afterAll(async () => {
    await app.close();
    probe.disconnect();
    await server.stop();
  });

  beforeEach(() => (seen.length = 0));

  it('caught up: no read is waiting at Redis while the fetch is handled; one is once it is done, and the next event is handled', async () => {
    // The worker's first read measures the entries (a read of its own); a lone event brings it to its usual reads.
    await publisher.publish('timed', { n: 0 });
    await waitFor(() => seen.length === 1, 'the first event handled');
    await waitFor(async () => blockedClients(await probe.info('clients')) === 1, 'the worker blocked in its read again');
    seen.length = 0;
    await publisher.publishMany([1, 2].map((n) => ({ event: 'timed', data: { n } })));
    await waitFor(() => seen.length === 2, 'the fetch handled');
    expect(seen).toEqual([1, 2].map((n) => ({ n, blockedReads: 0 })));
    await waitFor(async () => blockedClients(await probe.info('clients')) === 1, 'the next read blocked at Redis');

    await publisher.publish('timed', { n: 4 });
    await waitFor(() => seen.length === 3, 'the next event handled');
    expect(seen[2]).toEqual({ n: 4, blockedReads: 0 });
  });

  it('caught up with a longer fetch (events coming faster than a round trip): the next read waits at Redis while it is handled', async () => {
    await publisher.publishMany([11, 12, 13, 14].map((n) => ({ event: 'timed', data: { n } })));
    await waitFor(() => seen.length === 4, 'the fetch handled');
    expect(seen.map((s) => s.n)).toEqual([11, 12, 13, 14]);
    // The read went out before the first handler: by the last entry it is blocked at Redis.
    expect(seen[3].blockedReads).toBe(1);
  });

  it('a failure retried in place in a caught-up fetch: every entry handled in order, then the worker waits at Redis again', async () => {
    failOnce.add(6);
    await publisher.publishMany([5, 6, 7].map((n) => ({ event: 'timed', data: { n } })));
    await waitFor(() => seen.filter((s) => s.n === 7).length === 1, 'the fetch handled after the retry');
    // 6 failed once and was handled again; every entry of the fetch was handled, in order, and none after 6 twice.
    const order = seen.map((s) => s.n);
    expect(order.filter((n) => n === 5)).toHaveLength(1);
    expect(order.filter((n) => n === 6)).toHaveLength(2);
    expect(order.indexOf(7)).toBeGreaterThan(order.lastIndexOf(6));
    await waitFor(async () => blockedClients(await probe.info('clients')) === 1, 'the next read blocked at Redis');
    await publisher.publish('timed', { n: 8 });
    await waitFor(() => seen.some((s) => s.n === 8), 'the next event handled');
  });
});
