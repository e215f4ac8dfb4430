import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailPublisher } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { countEntriesAfter } from '../../lib/consumer/coordination/lag';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

describe('lag counting', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext;
  let offsets: string[];
  const count = (after: string): Promise<{ lag: number; capped: boolean }> =>
    countEntriesAfter(app.get(EventrailRedis).client, app.get(EventrailRedis).keys.stream(0), after, 10); // a cap of 10, so both sides pass it quickly

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    prefix = uniquePrefix('lag');
    app = await createApp({ prefix });
    offsets = (await app.get(EventrailPublisher).publishMany(Array.from({ length: 50 }, (_, n) => ({ event: 'e', data: { n } })))).map(
      (p) => p.offset,
    );
  });
  afterAll(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('counts the entries after the offset when they are few', async () => {
    expect(await count(offsets[44])).toEqual({ lag: 5, capped: false });
    expect(await count(offsets[39])).toEqual({ lag: 10, capped: false }); // exactly the cap is still exact
    expect(await count(offsets[49])).toEqual({ lag: 0, capped: false });
  });

  it('counts the entries up to the offset instead when those are few, so a long backlog stays exact', async () => {
    expect(await count('0-0')).toEqual({ lag: 50, capped: false });
    expect(await count(offsets[2])).toEqual({ lag: 47, capped: false });
    expect(await count(offsets[9])).toEqual({ lag: 40, capped: false });
  });

  it('reports the cap as a lower bound when both sides pass it', async () => {
    expect(await count(offsets[24])).toEqual({ lag: 10, capped: true });
  });

  it('counts only what is still there when the offset is behind a trim', async () => {
    const stream = new EventrailKeys(prefix, 1).stream(0);
    await redis.xtrim(stream, 'MINID', offsets[20]);
    expect(await count(offsets[4])).toEqual({ lag: 30, capped: false });
  });
});
