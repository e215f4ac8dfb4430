import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

const handled: string[] = [];

@Injectable()
class ThreeGroups {
  @OnEvent('ping', 'one')
  one(m: EventrailMessage): void {
    handled.push(`one:${m.id}`);
  }
  @OnEvent('ping', 'two')
  two(m: EventrailMessage): void {
    handled.push(`two:${m.id}`);
  }
  @OnEvent('ping', 'three')
  three(m: EventrailMessage): void {
    handled.push(`three:${m.id}`);
  }
}

/** Total calls per command from INFO commandstats. */
async function commandCalls(redis: Redis): Promise<Map<string, number>> {
  const info = await redis.info('commandstats');
  const calls = new Map<string, number>();
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(match[1], Number(match[2]));
  return calls;
}

describe('idle consumers', () => {
  // A Redis of its own, so no other test's traffic is counted.
  let server: RedisServer;
  let redis: Redis;
  let app: INestApplicationContext;

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
    app = await createApp({ redis: server.url, prefix: 'idle', partitions: 2 }, [ThreeGroups]);
  });
  afterAll(async () => {
    await app.close();
    redis.disconnect();
    await server.stop();
  });

  it('send almost no commands while nothing is published, and wake at once when something is', async () => {
    const consumers = app.get(EventrailConsumers);
    await waitFor(() => Object.values(consumers.ownership()).every((p) => p.length === 2), 'all partitions owned');
    // Every partition worker is parked in a blocking read: 3 groups x 2 partitions.
    await waitFor(async () => /blocked_clients:6\b/.test(await redis.info('clients')), 'six blocked reads');
    const windowMs = 4_000;
    const before = await commandCalls(redis);
    const started = Date.now();
    // Measures a window of idleness: waiting on elapsed time is the point of this test.
    await waitFor(() => Date.now() - started >= windowMs, 'idle window elapsed', windowMs + 1_000, 200);
    const after = await commandCalls(redis);
    const sent: Record<string, number> = {};
    for (const [name, calls] of after) {
      const delta = calls - (before.get(name) ?? 0);
      if (delta > 0 && name !== 'info') sent[name] = delta;
    }
    const total = Object.values(sent).reduce((a, b) => a + b, 0);
    const perGroupPerSecond = total / 3 / (windowMs / 1000);
    expect({ perGroupPerSecond: perGroupPerSecond <= 1, sent }).toEqual({ perGroupPerSecond: true, sent });

    const published = await app.get(EventrailPublisher).publish('ping', {});
    await waitFor(() => handled.length === 3, 'all three groups woke up');
    expect(handled.sort()).toEqual([`one:${published.id}`, `three:${published.id}`, `two:${published.id}`]);
  });
});

const batched: number[] = [];

@Injectable()
class WaitingBatches {
  @OnEvent('ping', { group: 'bulk', batch: { maxSize: 100, maxWaitMs: 50 } })
  book(messages: EventrailMessage[]): void {
    batched.push(messages.length);
  }
}

describe('idle batch handlers with maxWaitMs', () => {
  let server: RedisServer;
  let redis: Redis;
  let app: INestApplicationContext;

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
    app = await createApp({ redis: server.url, prefix: 'idle-batch' }, [WaitingBatches]);
  });
  afterAll(async () => {
    await app.close();
    redis.disconnect();
    await server.stop();
  });

  it('do not poll while waiting for a fuller batch, nor after it', async () => {
    await app.get(EventrailPublisher).publish('ping', {});
    await waitFor(() => batched.length === 1, 'the lone message flushed after maxWaitMs');
    await waitFor(async () => /blocked_clients:1\b/.test(await redis.info('clients')), 'the worker parked in a blocking read');
    const windowMs = 2_000;
    const before = await commandCalls(redis);
    const started = Date.now();
    // Measures a window of idleness: waiting on elapsed time is the point of this test.
    await waitFor(() => Date.now() - started >= windowMs, 'idle window elapsed', windowMs + 1_000, 200);
    const after = await commandCalls(redis);
    // Heartbeats and lease renewals only (about one a second each with the defaults); at most one re-sent blocking read.
    expect((after.get('xread') ?? 0) - (before.get('xread') ?? 0)).toBeLessThanOrEqual(1);
    expect(batched).toEqual([1]);
  });
});
