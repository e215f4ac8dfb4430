import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { CommitQueue } from '../../lib/consumer/pipeline/commit-queue';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { partitionWorker } from './support/internals';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

/**
 * A worker that recovers (its partition's last owner did not release it) waits for each fetch's commit
 * before it goes on. When that fetch was not handled whole (a failure that could not be recorded), it
 * reads again from the unfinished entry on a fresh connection. A hand-back (drain, finishing the batch)
 * that arrives while that commit travels must end the worker there: no fresh read connection opened
 * after the drain closed the old one (it stayed open until the app closed, and a read went on it a
 * second later).
 */

const calls: string[] = [];
/** Set by X1's call: the next commit flush (the one after X1's unfinished fetch) is held. */
const hold = { next: false };

@Injectable()
class Failing {
  @OnEvent('restart.event', { group: 'rec', ordering: 'partition', maxRetries: 0, retryBackoffMs: 5, retryBackoffMaxMs: 10 })
  handle(message: EventrailMessage<{ n: string }>): void {
    calls.push(message.data.n);
    if (message.data.n.startsWith('X')) {
      hold.next = true;
      throw new Error('X is down');
    }
  }
}

describe('a hand-back while a recovering worker waits for the commit of a fetch it could not finish', () => {
  let server: RedisServer;
  let probe: Redis;
  let app: INestApplicationContext | undefined;
  jest.setTimeout(30_000);

  beforeAll(async () => {
    server = await startRedisServer();
    probe = new Redis(server.url);
  });
  afterEach(async () => {
    jest.restoreAllMocks();
    await app?.close();
    app = undefined;
  });
  afterAll(async () => {
    probe.disconnect();
    await server.stop();
  });

  it('opens no read connection after the drain', async () => {
    const prefix = uniquePrefix('drainrestart');
    const keys = new EventrailKeys(prefix, 1);
    // An earlier owner took the partition (epoch 41) and never released it: the next owner recovers.
    await probe.set(keys.epoch('rec', 0), '41');
    // The dead-letter stream's key holds a string: X1's failure cannot be recorded, its fetch is not finished.
    await probe.set(keys.deadLetters('rec'), 'in the way');

    // Connections opened to read again from an unfinished entry, and whether the worker was draining then.
    const restarts: Array<{ connection: { status: string }; afterDrain: boolean }> = [];
    let drained = false;
    const duplicateForReads = EventrailRedis.prototype.duplicateForReads;
    jest.spyOn(EventrailRedis.prototype, 'duplicateForReads').mockImplementation(function (this: EventrailRedis) {
      const connection = duplicateForReads.call(this);
      if (new Error().stack?.includes('restartAt')) restarts.push({ connection, afterDrain: drained });
      return connection;
    });
    // The commit that follows X1's unfinished fetch is held until the hand-back has begun.
    let held: (() => void) | undefined;
    const flush = CommitQueue.prototype.flush;
    jest.spyOn(CommitQueue.prototype, 'flush').mockImplementation(function (this: CommitQueue) {
      if (!hold.next) return flush.call(this);
      hold.next = false;
      return new Promise<boolean>((resolve) => (held = () => resolve(flush.call(this))));
    });

    app = await createApp({ redis: server.url, prefix, partitions: 1 }, [Failing]);
    const consumers = app.get(EventrailConsumers);
    await waitFor(() => consumers.ownership().rec?.length === 1, 'the partition owned');
    const worker = partitionWorker(app, 'rec')!;
    expect((worker as unknown as { recovery: { active: boolean } }).recovery.active).toBe(true);

    await app.get(EventrailPublisher).publishMany([
      { event: 'restart.event', data: { n: 'A1' } },
      { event: 'restart.event', data: { n: 'X1' } },
    ]);
    await waitFor(() => held !== undefined, "the commit after X1's unfinished fetch sent and held");
    expect(calls).toEqual(['A1', 'X1']);

    // A worker that takes the partition after the hand-back can record X1's failure.
    await probe.del(keys.deadLetters('rec'));
    drained = true;
    const stopped = worker.stopGracefully(10_000, true);
    held!();
    await stopped;

    expect(restarts.filter((r) => r.afterDrain).map((r) => r.connection.status)).toEqual([]);
  });
});
