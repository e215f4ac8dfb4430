import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { ConsumerOptions, EventrailAdmin, EventrailConsumers, GroupHasLiveMembersError, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/log/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

/**
 * A running group stays visible, and a prune or delete that races a worker
 * joining never takes a live group away or leaves it half there.
 */

@Injectable()
class Racer {
  @OnEvent('race.ping', 'racer')
  handle(): void {}
}

/** A small seeded generator (mulberry32), so a failing interleaving can be run again. */
function seeded(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Resolves after `ticks` turns of the event loop: jitter at the scale of one Redis round trip, not a sleep. */
async function turns(ticks: number): Promise<void> {
  for (let i = 0; i < ticks; i++) await new Promise((resolve) => setImmediate(resolve));
}

describe('group lifecycle: registry, prune and delete against running workers', () => {
  const partitions = 2;
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let tool: INestApplicationContext;
  let admin: EventrailAdmin;
  let workers: INestApplicationContext[] = [];

  /** `fastTicks`: heartbeats every 200 ms. Otherwise the defaults, so a loaded host never lets a member expire mid-race. */
  const startWorker = async ({ autoStart = true, fastTicks = false } = {}): Promise<INestApplicationContext> => {
    const groups: Record<string, ConsumerOptions> = fastTicks ? { racer: { lockTtlMs: 600, heartbeatTtlMs: 600 } } : {};
    const app = await createApp({ prefix, partitions, autoStart, groups }, [Racer]);
    workers.push(app);
    return app;
  };

  /** What a live group must have: the registry entry, this member, its events, and per owned partition its lease and an offset. */
  const liveGroupProblems = async (workerId: string, owned: number[]): Promise<string[]> => {
    const problems: string[] = [];
    if (!(await redis.sismember(keys.groups, 'racer'))) problems.push('not in the registry');
    if ((await redis.zscore(keys.members('racer'), workerId)) === null) problems.push('worker not a member');
    if (!(await redis.sismember(keys.events('racer'), 'race.ping'))) problems.push('events not registered');
    if (owned.length !== partitions) problems.push(`owns ${owned.length} partitions`);
    for (const p of owned) {
      const lease = await redis.get(keys.lease('racer', p));
      if (!lease?.startsWith(`${workerId}:`)) problems.push(`partition ${p}: lease ${lease}`);
      if ((await redis.get(keys.offset('racer', p))) === null) problems.push(`partition ${p}: no offset`);
    }
    return problems;
  };

  /** A group whose members left a minute ago, with offsets, marks and a dead letter: what a prune removes. */
  const seedStaleGroup = async (): Promise<void> => {
    const pipeline = redis.pipeline().sadd(keys.groups, 'racer').sadd(keys.events('racer'), 'race.ping');
    pipeline.set(keys.seen('racer'), String(Date.now() - 60_000)).xadd(keys.deadLetters('racer'), '*', 'reason', 'old');
    for (let p = 0; p < partitions; p++)
      pipeline.set(keys.offset('racer', p), '1-0').zadd(keys.done('racer', p), Date.now() + 60_000, 'old-id');
    await pipeline.exec();
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(async () => {
    prefix = uniquePrefix('life');
    keys = new EventrailKeys(prefix, partitions);
    tool = await createApp({ prefix, partitions });
    admin = tool.get(EventrailAdmin);
  });
  afterEach(async () => {
    await Promise.all(workers.map((w) => w.close()));
    workers = [];
    await tool.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('puts a running group back in the registry at its next heartbeat', async () => {
    const worker = await startWorker({ fastTicks: true });
    await worker.get(EventrailConsumers).whenRunning();
    expect((await admin.groups()).map((g) => g.name)).toEqual(['racer']);
    await redis.srem(keys.groups, 'racer');
    expect(await admin.groups()).toEqual([]);
    await waitFor(async () => (await redis.sismember(keys.groups, 'racer')) === 1, 'racer registered again');
    expect((await admin.groups()).map((g) => g.name)).toEqual(['racer']);
  });

  it.each([
    ['pruneStaleGroups', (): Promise<unknown> => admin.pruneStaleGroups({ staleMs: 30_000 })],
    [
      'deleteGroup',
      (): Promise<unknown> =>
        admin.deleteGroup('racer').catch((error: unknown) => {
          if (!(error instanceof GroupHasLiveMembersError)) throw error;
        }),
    ],
  ])('%s racing a worker that joins never removes the live group nor leaves it half there', async (_name, remove) => {
    const random = seeded(20261201);
    const iterations = 80;
    let removedBeforeJoin = 0;
    for (let i = 0; i < iterations; i++) {
      await seedStaleGroup();
      const worker = await startWorker({ autoStart: false });
      const consumers = worker.get(EventrailConsumers);
      const [joinDelay, removeDelay] = [Math.floor(random() * 6), Math.floor(random() * 6)];
      await Promise.all([turns(joinDelay).then(() => consumers.start()), turns(removeDelay).then(remove)]);
      if ((await redis.exists(keys.deadLetters('racer'))) === 0) removedBeforeJoin++;

      const owned = consumers.ownership().racer;
      const problems = await liveGroupProblems(consumers.workerId, owned);
      expect({ iteration: i, joinDelay, removeDelay, problems }).toEqual({ iteration: i, joinDelay, removeDelay, problems: [] });
      // Nothing of the dropped group survives in a partition the new one took: its old done-mark is gone.
      if ((await redis.exists(keys.deadLetters('racer'))) === 0) {
        for (const p of owned) expect(await redis.zscore(keys.done('racer', p), 'old-id')).toBeNull();
      }
      await worker.close();
      workers = workers.filter((w) => w !== worker);
    }
    // The loop exercised both outcomes: removed before the join, and refused because the worker was live.
    expect(removedBeforeJoin).toBeGreaterThan(0);
    expect(removedBeforeJoin).toBeLessThan(iterations);
  });

  it('a forced delete fences the running worker, which takes the group back at once', async () => {
    const worker = await startWorker({ fastTicks: true });
    const consumers = worker.get(EventrailConsumers);
    await consumers.whenRunning();
    const before = await redis.get(keys.lease('racer', 0));
    const epochOf = (token: string | null): number => Number(token?.slice(token.lastIndexOf(':') + 1));
    await expect(admin.deleteGroup('racer')).rejects.toBeInstanceOf(GroupHasLiveMembersError);
    await admin.deleteGroup('racer', { force: true });
    await waitFor(async () => {
      const lease = await redis.get(keys.lease('racer', 0));
      return epochOf(lease) > epochOf(before) && (await liveGroupProblems(consumers.workerId, consumers.ownership().racer)).length === 0;
    }, 'the group back, with a new lease');
  });
});
