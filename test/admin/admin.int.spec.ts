import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import {
  EventrailAdmin,
  EventrailConsumers,
  EventrailMessage,
  EventrailPublisher,
  GroupHasLiveMembersError,
  OnEvent,
  UnknownGroupError,
} from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const seen: number[] = [];

@Injectable()
class Counter {
  @OnEvent(['n.added', 'n.removed'], 'counter')
  count(message: EventrailMessage<{ n: number }>): void {
    seen.push(message.data.n);
  }
}

describe('EventrailAdmin: groups, offsets, stale groups, stats', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];
  const start = async (providers: unknown[] = [Counter]): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, partitions: 2 }, providers as never[]);
    apps.push(app);
    return app;
  };
  const closeAll = async (): Promise<void> => {
    await Promise.all(apps.map((a) => a.close()));
    apps = [];
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('adm');
    keys = new EventrailKeys(prefix, 2);
    seen.length = 0;
  });
  afterEach(async () => {
    await closeAll();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('reports members, offsets, lag, lease owners and dead letters per group', async () => {
    const app = await start();
    const admin = app.get(EventrailAdmin);
    const publisher = app.get(EventrailPublisher);
    const published = await publisher.publishMany([1, 2, 3].map((n) => ({ event: 'n.added', data: { n }, partition: 1 })));
    await waitFor(async () => (await redis.get(keys.offset('counter', 1))) === published[2].offset, 'consumed');
    // Lag that nobody consumes: a group registered by hand, as if its workers were gone.
    await redis.sadd(keys.groups, 'ghost');

    const [counter, ghost] = await admin.groups();
    const workerId = app.get(EventrailConsumers).workerId;
    expect(counter).toMatchObject({ name: 'counter', events: ['n.added', 'n.removed'], lag: 0, deadLetters: 0 });
    expect(counter.members).toHaveLength(1);
    expect(counter.members[0]).toMatchObject({ workerId, pid: process.pid });
    expect(counter.members[0].lastHeartbeat!.getTime()).toBeLessThanOrEqual(Date.now() + 1000);
    expect(counter.partitions.map((p) => [p.partition, p.committed, p.lag, p.leaseOwner])).toEqual([
      [0, '0-0', 0, workerId],
      [1, published[2].offset, 0, workerId],
    ]);
    expect(ghost).toMatchObject({ name: 'ghost', members: [], lag: 3, lastSeen: null });
    expect(ghost.partitions[1]).toMatchObject({ committed: null, lag: 3, lagCapped: false, leaseOwner: null });
    await expect(admin.group('nope')).rejects.toBeInstanceOf(UnknownGroupError);
    expect((await admin.group('counter')).name).toBe('counter');

    const stats = await admin.stats();
    expect(stats.partitions).toEqual([
      { partition: 0, length: 0, firstId: null, lastId: null, entriesAdded: 0 },
      { partition: 1, length: 3, firstId: published[0].offset, lastId: published[2].offset, entriesAdded: 3 },
    ]);
    expect(stats.usedMemoryBytes).toBeGreaterThan(0);
  });

  it('resets offsets: dry run, refusal with live members, and a forced reset that fences the running worker', async () => {
    const app = await start();
    const admin = app.get(EventrailAdmin);
    const published = await app.get(EventrailPublisher).publishMany([1, 2, 3, 4].map((n) => ({ event: 'n.added', data: { n } })));
    await waitFor(() => seen.length === 4, 'first pass');

    const dry = await admin.resetOffsets('counter', { id: published[2].offset }, { dryRun: true });
    expect(dry.partitions[0]).toEqual({ partition: 0, from: published[3].offset, to: expect.any(String) });
    expect(await redis.get(keys.offset('counter', 0))).toBe(published[3].offset);
    await expect(admin.resetOffsets('counter', 'start')).rejects.toBeInstanceOf(GroupHasLiveMembersError);

    // Forced while running: entries from the third one on are handled again, by the same worker after it lost its lease.
    // Idempotency marks go with the reset, or they would skip what the reset asks for.
    await redis.zadd(keys.done('counter', 0), Date.now() + 60_000, 'some-event-id');
    await admin.resetOffsets('counter', { id: published[2].offset }, { force: true });
    expect(await redis.exists(keys.done('counter', 0))).toBe(0);
    await waitFor(
      () => seen.length === 6,
      () => `handled ${JSON.stringify(seen)}`,
    );
    expect(seen).toEqual([1, 2, 3, 4, 3, 4]);
    await waitFor(async () => (await redis.get(keys.offset('counter', 0))) === published[3].offset, 'committed again');

    // By time and to the end, on a stopped group.
    await closeAll();
    const tool = (await start([])).get(EventrailAdmin);
    const byTime = await tool.resetOffsets('counter', { time: new Date(0) });
    expect(byTime.partitions.map((p) => p.to)).toEqual(['0-0', '0-0']);
    const toEnd = await tool.resetOffsets('counter', 'end');
    expect(toEnd.partitions.map((p) => p.to)).toEqual([published[3].offset, '0-0']);
  });

  it('prunes only groups whose members have all been gone longer than the threshold, and deletes groups', async () => {
    const live = await start();
    await redis.sadd(keys.groups, 'old', 'recent');
    await redis.set(keys.seen('old'), String(Date.now() - 60_000));
    await redis.set(`${prefix}:group:{old}:offset-check`, 'kept by nobody'); // not a key eventrail owns: untouched
    await redis.set(keys.offset('old', 0), '5-0');
    await redis.set(keys.seen('recent'), String(Date.now()));
    const admin = live.get(EventrailAdmin);

    expect(await admin.pruneStaleGroups({ staleMs: 30_000 })).toEqual(['old']);
    expect(await redis.exists(keys.offset('old', 0))).toBe(0);
    expect(await redis.sismember(keys.groups, 'old')).toBe(0);
    expect(await admin.pruneStaleGroups({ staleMs: 0 })).toEqual(['recent']);
    expect((await admin.groups()).map((g) => g.name)).toEqual(['counter']);

    await expect(admin.deleteGroup('counter')).rejects.toBeInstanceOf(GroupHasLiveMembersError);
    await closeAll();
    const afterStop = await start([]);
    await afterStop.get(EventrailAdmin).deleteGroup('counter');
    expect(await afterStop.get(EventrailAdmin).groups()).toEqual([]);
    expect(await redis.exists(keys.offset('counter', 0), keys.events('counter'))).toBe(0);
  });
});
