import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/log/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

@Injectable()
class TwoGroups {
  @OnEvent('order.placed', 'alpha')
  alpha(_message: EventrailMessage): void {}

  @OnEvent('order.placed', 'beta')
  beta(_message: EventrailMessage): void {}
}

describe('dead-letter replay', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('dlr');
    keys = new EventrailKeys(prefix, 1);
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  const lastOffset = async (): Promise<string> => (await redis.xrevrange(keys.stream(0), '+', '-', 'COUNT', 1))[0][0];
  const committedPast = (group: string, offset: string) => async (): Promise<boolean> =>
    (await redis.get(keys.offset(group, 0))) === offset;

  it('replays a malformed dead letter to the group that replays it only', async () => {
    const app = await createApp({ prefix }, [TwoGroups]);
    apps.push(app);
    const admin = app.get(EventrailAdmin);
    // A producer in another language forgot `data`.
    const malformed = (await redis.xadd(keys.stream(0), '*', 'event', 'order.placed', 'id', 'foreign-1')) as string;
    for (const group of ['alpha', 'beta']) await waitFor(committedPast(group, malformed), `${group} past the malformed entry`);
    expect((await admin.deadLetters('alpha')).map((l) => l.reason)).toEqual(['malformed']);
    expect(await admin.deadLetterCount('beta')).toBe(1);

    expect(await admin.replayDeadLetters('alpha', 'all')).toBe(1);
    const replayed = await lastOffset();
    expect(replayed > malformed).toBe(true);
    // alpha dead-letters it again (it is still malformed); beta skips it.
    for (const group of ['alpha', 'beta']) await waitFor(committedPast(group, replayed), `${group} past the replayed entry`);
    const again = await admin.deadLetters('alpha');
    expect(again.map((l) => [l.reason, l.offset])).toEqual([['malformed', replayed]]);
    expect((await admin.deadLetters('beta')).map((l) => l.offset)).toEqual([malformed]);
    // The admin view shows whom it is for.
    expect(await admin.logEntry(0, replayed)).toMatchObject({ to: 'alpha', malformed: 'missing field "data"' });
  });
});
