import { Injectable } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailMessage, OnEvent, RedisFullError } from '../../lib';
import { createApp } from '../support/app';
import { RedisServer, startRedisServer } from '../support/redis-server';

@Injectable()
class Mailer {
  @OnEvent('user.created', 'mailer')
  handle(_message: EventrailMessage): void {}
}

/** A worker that starts on a Redis at its `maxmemory` (noeviction) cannot join its group: it says so, typed. */
describe('a worker starting on a full Redis', () => {
  let server: RedisServer;
  let redis: Redis;

  beforeAll(async () => {
    server = await startRedisServer(undefined, ['--maxmemory-policy', 'noeviction']);
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it('fails with RedisFullError naming the group registration it could not write, and starts once memory is freed', async () => {
    // The log exists (its metadata written before the fill), as on a Redis that filled up while the app was down.
    const first = await createApp({ redis: server.url, prefix: 'full-start' });
    await first.close();
    // Full by a wide margin: maxmemory 2 MiB below what Redis uses. Filling until a write is refused leaves it
    // less than one write over, and Redis frees that much on its own (an idle client's query buffer, shrunk by
    // its cron), which on a slow host let the join's later writes through.
    const filled = 40;
    for (let i = 0; i < filled; i++) await redis.set(`filler:${i}`, 'x'.repeat(100_000));
    const used = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))![1]);
    await redis.config('SET', 'maxmemory', String(used - 2 * 1024 * 1024));
    await expect(redis.set('probe', '1')).rejects.toThrow(/^OOM/);
    const refused = await createApp({ redis: server.url, prefix: 'full-start' }, [Mailer]).then(
      (app) => app.close().then(() => undefined),
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(RedisFullError);
    expect((refused as RedisFullError).operation).toBe('join group "mailer" (its heartbeat and event types)');
    expect((refused as Error).message).toMatch(/^Redis is full .*refused to join group "mailer".*: OOM command not allowed/);
    // Nothing of the group was written.
    expect(await redis.exists('full-start:group:{mailer}:members', 'full-start:groups')).toBe(0);

    await redis.del(...Array.from({ length: filled }, (_, i) => `filler:${i}`));
    const app = await createApp({ redis: server.url, prefix: 'full-start' }, [Mailer]);
    await app.close();
  });
});
