import { Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailConsumers, EventrailModule, EventrailPublisher, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { freePort, startRedisServer } from '../support/redis-server';

@Injectable()
class Mailer {
  readonly seen: string[] = [];

  @OnEvent('user.created', 'mailer')
  handle(message: { id: string }): void {
    this.seen.push(message.id);
  }
}

/** Settles to 'pending' when `promise` has not settled by the time everything queued so far has run. */
async function state(promise: Promise<unknown>): Promise<'resolved' | 'rejected' | 'pending'> {
  const marker = Symbol('pending');
  const result = await Promise.race([
    promise.then(
      () => 'resolved' as const,
      () => 'rejected' as const,
    ),
    new Promise<typeof marker>((resolve) => setImmediate(() => resolve(marker))),
  ]);
  return result === marker ? 'pending' : result;
}

describe('EventrailConsumers.whenRunning()', () => {
  let redis: Redis;
  let prefix: string;

  beforeEach(() => {
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('ready');
  });

  afterEach(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('with autoStart, has resolved by the time init returns, with the partitions taken', async () => {
    const app = await createApp({ prefix, partitions: 3 }, [Mailer]);
    try {
      const consumers = app.get(EventrailConsumers);
      await consumers.whenRunning();
      expect(consumers.isRunning).toBe(true);
      expect(consumers.ownership()).toEqual({ mailer: [0, 1, 2] });
      const status = await app.get(EventrailAdmin).group('mailer');
      expect(status.partitions.map((p) => p.leaseOwner)).toEqual([consumers.workerId, consumers.workerId, consumers.workerId]);
    } finally {
      await app.close();
    }
  });

  it('with autoStart: false, stays pending until start() and then resolves with the group consuming', async () => {
    const app = await createApp({ prefix, autoStart: false }, [Mailer]);
    try {
      const consumers = app.get(EventrailConsumers);
      const running = consumers.whenRunning();
      expect(await state(running)).toBe('pending');
      expect(consumers.ownership()).toEqual({ mailer: [] });
      await consumers.start();
      expect(await state(running)).toBe('resolved');
      expect(consumers.ownership()).toEqual({ mailer: [0] });
      const { id } = await app.get(EventrailPublisher).publish('user.created', {});
      await waitFor(() => app.get(Mailer).seen.includes(id), 'the event handled after whenRunning()');
    } finally {
      await app.close();
    }
  });

  it('after a degraded start, resolves only once Redis answers', async () => {
    const port = await freePort();
    const moduleRef = await Test.createTestingModule({
      imports: [EventrailModule.forRoot({ redis: `redis://127.0.0.1:${port}`, prefix, startupTimeoutMs: 200, allowDegradedStart: true })],
      providers: [Mailer],
    }).compile();
    const app = await moduleRef.init();
    const consumers = app.get(EventrailConsumers);
    const running = consumers.whenRunning();
    let server: Awaited<ReturnType<typeof startRedisServer>> | undefined;
    try {
      expect(await state(running)).toBe('pending');
      expect(consumers.isRunning).toBe(false);
      server = await startRedisServer(port);
      await running;
      expect(consumers.ownership()).toEqual({ mailer: [0] });
    } finally {
      await app.close();
      await server?.stop();
    }
  });
});
