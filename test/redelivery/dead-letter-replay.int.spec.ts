import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, NonRetryableError, OnEvent } from '../../lib';
import { isMalformed, RawEntry, readEntry } from '../../lib/wire/codec';
import { EventrailKeys } from '../../lib/redis/keys';
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

@Injectable()
class Refuser {
  @OnEvent('order.placed', 'ledger')
  refuse(): void {
    throw new NonRetryableError('refused');
  }
}

describe('concurrent dead-letter replays', () => {
  const LETTERS = 300;
  const REPLAYS = 5;
  /** The event ids `publishMany` returned: derived from each entry's position (lean entries). */
  let publishedIds: string[] = [];
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(async () => {
    prefix = uniquePrefix('dlc');
    keys = new EventrailKeys(prefix, 1);
    // Dead letters made by a group that refuses everything; it stops before the replays, so nothing consumes them.
    const consumer = await createApp({ prefix }, [Refuser]);
    const published = await consumer
      .get(EventrailPublisher)
      .publishMany(Array.from({ length: LETTERS }, (_, n) => ({ event: 'order.placed', data: { n }, key: `k${n}` })));
    publishedIds = published.map((p) => p.id);
    await waitFor(async () => (await redis.get(keys.offset('ledger', 0))) === published[LETTERS - 1].offset, 'every event dead-lettered');
    await consumer.close();
    // One admin per "process": each on its own connection, consuming nothing.
    apps = await Promise.all(Array.from({ length: REPLAYS }, () => createApp({ prefix, autoStart: false })));
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  /** Event ids of the entries replays appended for `ledger`, in log order. */
  const appendedIds = async (): Promise<string[]> =>
    (await redis.xrange(keys.stream(0), '-', '+'))
      .map(([offset, fields]) => readEntry(offset, fields, { partition: 0, logTag: keys.logTag }))
      .filter((entry): entry is RawEntry => !isMalformed(entry) && entry.to === 'ledger')
      .map((entry) => entry.id);

  it.each([
    ["'all'", (): 'all' => 'all'],
    ['the same ids', (ids: string[]): string[] => ids],
  ])('appends each dead letter once when %s are replayed by five admins at once', async (_label, target) => {
    const admins = apps.map((app) => app.get(EventrailAdmin));
    const letters = await admins[0].deadLetters('ledger', { count: LETTERS });
    expect(letters).toHaveLength(LETTERS);
    const replayed = await Promise.all(admins.map((admin) => admin.replayDeadLetters('ledger', target(letters.map((l) => l.id)))));
    const appended = await appendedIds();
    expect(appended).toHaveLength(LETTERS);
    expect(new Set(appended).size).toBe(LETTERS);
    expect(new Set(appended)).toEqual(new Set(letters.map((l) => l.eventId)));
    // Lean entries keep their identity through the dead-letter stream and the replay: the id publish returned.
    expect(new Set(appended)).toEqual(new Set(publishedIds));
    expect(replayed.reduce((a, b) => a + b, 0)).toBe(LETTERS);
    expect(await admins[0].deadLetterCount('ledger')).toBe(0);
  });

  it('keeps every dead letter whose append failed, and a later replay appends it', async () => {
    const admin = apps[0].get(EventrailAdmin);
    // The partition cannot be appended to: its key holds a string for a while.
    const stream = keys.stream(0);
    await redis.rename(stream, `${stream}:aside`);
    await redis.set(stream, 'not a stream');
    expect(await admin.replayDeadLetters('ledger', 'all')).toBe(0);
    expect(await admin.deadLetterCount('ledger')).toBe(LETTERS);
    await redis.del(stream);
    await redis.rename(`${stream}:aside`, stream);
    // The failed replay let go of its claims: no need to wait for them to expire.
    expect(await admin.replayDeadLetters('ledger', 'all')).toBe(LETTERS);
    expect(await appendedIds()).toHaveLength(LETTERS);
    expect(await admin.deadLetterCount('ledger')).toBe(0);
  });
});
