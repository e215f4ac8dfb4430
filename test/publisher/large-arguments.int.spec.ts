import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailClient, registerScripts } from '../../lib/redis/scripts';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

/**
 * Scripts that take a variable number of arguments, at the sizes a real fleet
 * reaches: Lua's `unpack` hands at most about 8000 values to one call, and a
 * script that errors halfway is not rolled back.
 */

const handled = new Set<string>();

@Injectable()
class BigBatch {
  @OnEvent('big.one', { group: 'big', batchSize: 10_000, enableIdempotency: true, idempotencyTtlMs: 3_600_000 })
  handle(message: EventrailMessage): void {
    handled.add(message.id);
  }
}

/** Ids of `ids` that have no done-mark in `key` (ZMSCORE in slices, to keep each reply small). */
async function unmarked(redis: Redis, key: string, ids: readonly string[]): Promise<string[]> {
  const missing: string[] = [];
  for (let i = 0; i < ids.length; i += 1000) {
    const slice = ids.slice(i, i + 1000);
    const scores = (await redis.zmscore(key, ...slice)) as Array<string | null>;
    scores.forEach((score, j) => {
      if (score === null) missing.push(slice[j]);
    });
  }
  return missing;
}

describe('scripts with many arguments', () => {
  let redis: Redis;
  let client: EventrailClient;
  let prefix: string;
  let keys: EventrailKeys;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
    client = registerScripts(redis.duplicate());
  });
  beforeEach(() => {
    prefix = uniquePrefix('many');
    keys = new EventrailKeys(prefix, 1);
  });
  afterEach(() => deletePrefix(redis, prefix));
  afterAll(() => {
    redis.disconnect();
    client.disconnect();
  });

  const acquire = async (): Promise<string> => {
    const reply = await client.eventrailAcquireLease(
      keys.lease('g', 0),
      keys.epoch('g', 0),
      keys.offset('g', 0),
      keys.stream(0),
      keys.recovery('g', 0),
      'worker',
      60_000,
      'start',
      '',
    );
    return reply![0];
  };

  it('commits 20000 done-marks with the offset in one step', async () => {
    const token = await acquire();
    const ids = Array.from({ length: 20_000 }, (_, i) => `event-${i}`);
    const result = await client.eventrailCommitOffset(
      keys.lease('g', 0),
      keys.offset('g', 0),
      keys.done('g', 0),
      keys.recovery('g', 0),
      keys.stream(0),
      token,
      '7-0',
      60_000,
      60_000,
      '',
      '',
      '',
      '0',
      0,
      ...ids,
    );
    expect(result).toBe(1);
    expect(await redis.get(keys.offset('g', 0))).toBe('7-0');
    expect(await redis.zcard(keys.done('g', 0))).toBe(20_000);
    expect(await unmarked(redis, keys.done('g', 0), ids)).toEqual([]);
  });

  it('leaves the offset where it was when the marks cannot be written', async () => {
    const token = await acquire();
    await redis.set(keys.done('g', 0), 'not a sorted set');
    await expect(
      client.eventrailCommitOffset(
        keys.lease('g', 0),
        keys.offset('g', 0),
        keys.done('g', 0),
        keys.recovery('g', 0),
        keys.stream(0),
        token,
        '9-0',
        60_000,
        60_000,
        '',
        '',
        '',
        '0',
        0,
        'a',
        'b',
      ),
    ).rejects.toThrow(/WRONGTYPE/);
    expect(await redis.get(keys.offset('g', 0))).toBe('0-0');
    await expect(
      client.eventrailCommitOffset(
        keys.lease('g', 0),
        keys.offset('g', 0),
        keys.done('g', 0),
        keys.recovery('g', 0),
        keys.stream(0),
        token,
        'not-an-id',
        60_000,
        0,
        '',
        '',
        '',
        '0',
        0,
      ),
    ).rejects.toThrow(/not a stream id: not-an-id/);
    expect(await redis.get(keys.offset('g', 0))).toBe('0-0');
  });

  it('forgets 20000 members that expired at once in one heartbeat', async () => {
    const members = keys.members('g');
    const info = keys.memberInfo('g');
    const dead = Array.from({ length: 20_000 }, (_, i) => `dead-${i}`);
    for (let i = 0; i < dead.length; i += 1000) {
      const slice = dead.slice(i, i + 1000);
      await redis.zadd(members, ...slice.flatMap((id) => [1, id]));
      await redis.hset(info, Object.fromEntries(slice.map((id) => [id, '{}'])));
    }
    const [generation, live] = await client.eventrailHeartbeat(
      members,
      info,
      keys.seen('g'),
      keys.generation('g'),
      'alive',
      60_000,
      '{"host":"h"}',
    );
    expect([generation, live]).toEqual(['0', ['alive']]);
    expect(await redis.zcard(members)).toBe(1);
    expect(await redis.hkeys(info)).toEqual(['alive']);
  });

  it('refuses a deduplicated append with more fields than one XADD can take, writing nothing', async () => {
    const dedup = keys.dedup(0, 'e1');
    const fields = Array.from({ length: 10_000 }, (_, i) => [`f${i}`, 'v']).flat();
    await expect(
      client.eventrailPublishDedup(dedup, keys.stream(0), keys.bigEntries(0), keys.indexedFrom(0), 60_000, ...fields),
    ).rejects.toThrow(/publishDedup: 20000 field arguments; an even number up to 7000/);
    expect(await redis.exists(dedup, keys.stream(0))).toBe(0);
    // The largest accepted count appends, and a repeat is a duplicate.
    const most = fields.slice(0, 7000);
    const [offset, duplicate] = await client.eventrailPublishDedup(
      dedup,
      keys.stream(0),
      keys.bigEntries(0),
      keys.indexedFrom(0),
      60_000,
      ...most,
    );
    expect(duplicate).toBe(0);
    expect(await client.eventrailPublishDedup(dedup, keys.stream(0), keys.bigEntries(0), keys.indexedFrom(0), 60_000, ...most)).toEqual([
      offset,
      1,
    ]);
    expect(await redis.xlen(keys.stream(0))).toBe(1);
  });

  it('resets an offset with 20000 done-marks, and changes nothing when a step fails', async () => {
    const token = await acquire();
    const ids = Array.from({ length: 20_000 }, (_, i) => `event-${i}`);
    const g0 = [keys.lease('g', 0), keys.offset('g', 0), keys.done('g', 0), keys.recovery('g', 0), keys.stream(0)] as const;
    await client.eventrailCommitOffset(...g0, token, '5-0', 60_000, 60_000, '', '', '', '0', 0, ...ids);
    const reset = (): Promise<string | null> =>
      client.eventrailResetOffset(
        keys.lease('g', 0),
        keys.offset('g', 0),
        keys.epoch('g', 0),
        keys.recovery('g', 0),
        keys.done('g', 0),
        keys.stream(0),
        '2-0',
      );

    await redis.set(keys.recovery('g', 0), 'not a hash');
    await expect(reset()).rejects.toThrow(/WRONGTYPE/);
    expect([await redis.get(keys.offset('g', 0)), await redis.zcard(keys.done('g', 0)), await redis.get(keys.lease('g', 0))]).toEqual([
      '5-0',
      20_000,
      token,
    ]);

    await redis.del(keys.recovery('g', 0));
    expect(await reset()).toBe('5-0');
    // The marks are gone; the lease is revoked (revoke-lease.lua), not deleted.
    expect([await redis.get(keys.offset('g', 0)), await redis.exists(keys.done('g', 0)), await redis.get(keys.lease('g', 0))]).toEqual([
      '2-0',
      0,
      `revoked:${token}`,
    ]);
  });

  describe('through the consumer', () => {
    let app: INestApplicationContext | undefined;
    afterEach(async () => {
      await app?.close();
      app = undefined;
      handled.clear();
    });

    it('keeps every done-mark of a batch of 10000 handled events, and commits the last one', async () => {
      app = await createApp({ prefix, partitions: 1, autoStart: false }, [BigBatch]);
      const published = await app
        .get(EventrailPublisher)
        .publishMany(Array.from({ length: 10_000 }, (_, n) => ({ event: 'big.one', data: { n } })));
      const last = published[published.length - 1].offset;
      await app.get(EventrailConsumers).start();
      await waitFor(async () => (await redis.get(keys.offset('big', 0))) === last, 'offset at the last event', 30_000);
      expect(handled.size).toBe(10_000);
      expect(await redis.zcard(keys.done('big', 0))).toBe(10_000);
      expect(
        await unmarked(
          redis,
          keys.done('big', 0),
          published.map((p) => p.id),
        ),
      ).toEqual([]);
    });
  });
});
