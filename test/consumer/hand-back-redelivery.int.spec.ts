import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { partitionWorker } from './support/internals';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

/**
 * A hand-back finishes what it has in hand, a parked message's redelivery included: once the worker's
 * read loop has ended, its group waits for the stop under way (a shutdown's would start nothing more),
 * and the redelivery's result is recorded before the lease goes: the next owner does not try it again.
 */

const world = { calls: [] as string[], failFirst: new Set<string>(), gate: undefined as Promise<void> | undefined, reached: false };

@Injectable()
class Parking {
  @OnEvent('parked.event', {
    group: 'parking',
    ordering: 'key',
    // Ticks every second: the group takes the partition again at its next one.
    lockTtlMs: 3_000,
    maxRetries: 0,
    retryBackoffMs: 5,
    retryBackoffMaxMs: 10,
    redelivery: { delayMs: 40, factor: 2, maxDelayMs: 100, maxAgeMs: 600_000 },
  })
  async handle(message: EventrailMessage<{ n: string }>): Promise<void> {
    const { n } = message.data;
    const attempt = world.calls.filter((c) => c === n).length;
    world.calls.push(n);
    if (world.failFirst.has(n) && attempt === 0) throw new Error(`${n} fails once`);
    if (n === 'X1' && world.gate) {
      world.reached = true;
      await world.gate;
    }
  }
}

describe('a hand-back while a parked message is redelivered', () => {
  let server: RedisServer;
  let probe: Redis;
  let app: INestApplicationContext | undefined;
  jest.setTimeout(30_000);

  beforeAll(async () => {
    server = await startRedisServer();
    probe = new Redis(server.url);
  });
  afterAll(async () => {
    await app?.close();
    probe.disconnect();
    await server.stop();
  });

  it('lets the redelivery in hand finish and records it: the next owner does not handle the message again', async () => {
    const prefix = uniquePrefix('backredeliver');
    const keys = new EventrailKeys(prefix, 1);
    app = await createApp({ redis: server.url, prefix, partitions: 1 }, [Parking]);
    const consumers = app.get(EventrailConsumers);
    await waitFor(() => consumers.ownership().parking?.length === 1, 'the partition owned');
    let open!: () => void;
    world.gate = new Promise<void>((resolve) => (open = resolve));
    world.failFirst.add('X1');
    const publisher = app.get(EventrailPublisher);
    await publisher.publish('parked.event', { n: 'X1' }, { key: 'x' });
    await waitFor(() => world.reached, "X1's redelivery started (after its first failure parked it)");

    const worker = partitionWorker(app, 'parking')!;
    const handedBack = worker.stopGracefully(10_000, true);
    // The read loop ends at once (nothing else in hand); the redelivery is still running.
    await waitFor(() => !worker.active, 'the worker draining');
    open();
    await handedBack;

    // The group takes the partition again (it is the only member) and goes on.
    await publisher.publish('parked.event', { n: 'Y1' }, { key: 'y' });
    await waitFor(() => world.calls.includes('Y1'), 'a later event handled by the next owner');
    await waitFor(
      async () => Object.keys(await probe.hgetall(keys.recovery('parking', 0))).every((f) => !f.startsWith('park:')),
      'no line parked',
    );
    expect(world.calls.filter((c) => c === 'X1')).toEqual(['X1', 'X1']);
  });
});
