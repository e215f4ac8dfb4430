import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import {
  EventrailConsumers,
  EventrailMessage,
  EventrailModuleOptions,
  EventrailPublisher,
  InvalidOptionError,
  NonRetryableError,
  OnEvent,
  SettleTimeoutError,
} from '../../lib';
import { waitUntilSettled, type SettlingGroup } from '../../lib/consumer/lifecycle/settle-watch';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

/** A gate a handler waits at until the test opens it. */
class Gate {
  private opened!: () => void;
  readonly open = new Promise<void>((resolve) => (this.opened = resolve));
  release(): void {
    this.opened();
  }
}

const state = {
  handled: [] as string[],
  /** Handlers of events with these keys wait at the gate. */
  gated: new Set<string>(),
  gate: new Gate(),
  started: [] as string[],
};

@Injectable()
class Workers {
  @OnEvent('job', { group: 'workers', concurrency: 4 })
  async work(message: EventrailMessage<{ fail?: boolean }>): Promise<void> {
    state.started.push(message.key ?? '');
    if (message.key !== null && state.gated.has(message.key)) await state.gate.open;
    if (message.data.fail) throw new NonRetryableError('bad job');
    state.handled.push(`workers:${message.key}`);
  }
}

@Injectable()
class Audit {
  @OnEvent('job', 'audit')
  record(message: EventrailMessage): void {
    state.handled.push(`audit:${message.key}`);
  }
}

describe('EventrailConsumers.settled()', () => {
  let redis: Redis;
  let prefix: string;
  let apps: INestApplicationContext[] = [];

  const start = async (options: EventrailModuleOptions = {}, providers: unknown[] = [Workers, Audit]): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, partitions: 4, ...options }, providers as never[]);
    apps.push(app);
    return app;
  };
  const jobs = (keys: string[], data: { fail?: boolean } = {}) => keys.map((key) => ({ event: 'job', data, key }));

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('settled');
    Object.assign(state, { handled: [], gated: new Set(), gate: new Gate(), started: [] });
  });
  afterEach(async () => {
    state.gate.release();
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('resolves once every group handled or dead-lettered everything published before the call', async () => {
    const app = await start();
    const keys = Array.from({ length: 40 }, (_, n) => `k${n}`);
    state.gated.add('k7');
    await app.get(EventrailPublisher).publishMany(jobs(keys));
    await app.get(EventrailPublisher).publish('job', { fail: true }, { key: 'poison' });
    await waitFor(() => state.started.includes('k7'), 'the gated handler to start');

    // What was handled when settled() resolved, seen from its own continuation.
    const seenAtSettle = app
      .get(EventrailConsumers)
      .settled()
      .then(() => ({ handled: [...state.handled], stats: app.get(EventrailConsumers).stats() }));
    state.gate.release();
    const { handled, stats } = await seenAtSettle;
    expect(handled.filter((h) => h.startsWith('workers:')).sort()).toEqual(keys.map((k) => `workers:${k}`).sort());
    expect(handled.filter((h) => h.startsWith('audit:')).sort()).toEqual([...keys, 'poison'].map((k) => `audit:${k}`).sort());
    expect(stats.workers).toMatchObject({ handled: 40, deadLettered: 1 });
    // Nothing new since: it resolves again at once.
    await app.get(EventrailConsumers).settled();
  });

  it('rejects after timeoutMs with SettleTimeoutError naming the groups and partitions still behind', async () => {
    const app = await start();
    state.gated.add('stuck');
    const result = await app.get(EventrailPublisher).publish('job', {}, { key: 'stuck' });
    // The audit group is done with it (handled and committed); the workers group is stuck at the gate.
    const keys = new EventrailKeys(prefix, 4);
    await waitFor(async () => (await redis.get(keys.offset('audit', result.partition))) === result.offset, 'the audit commit');
    const error = await app
      .get(EventrailConsumers)
      .settled({ timeoutMs: 300 })
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(SettleTimeoutError);
    const { lagging, timeoutMs } = error as SettleTimeoutError;
    expect(timeoutMs).toBe(300);
    expect(lagging).toEqual([
      {
        group: 'workers',
        partition: result.partition,
        committed: expect.any(String),
        target: result.offset,
        ownedHere: true,
        parked: false,
        parkedCount: 0,
      },
    ]);
    expect((error as Error).message).toMatch(
      new RegExp(
        `^settled\\(\\) timed out after 300 ms; still behind: group "workers" partition ${result.partition} at \\S+ of ${result.offset}$`,
      ),
    );
  });

  it('waits on Redis for partitions another process works, and on local commits for its own', async () => {
    const here = await start({}, [Workers]);
    const there = await start({}, [Workers]);
    await waitFor(
      () => here.get(EventrailConsumers).ownership().workers.length === 2 && there.get(EventrailConsumers).ownership().workers.length === 2,
      'the partitions to be shared two and two',
    );
    const theirs = new Set(there.get(EventrailConsumers).ownership().workers);
    const keys = Array.from({ length: 60 }, (_, n) => `j${n}`);
    const published = await here.get(EventrailPublisher).publishMany(jobs(keys));
    // Hold back one event in a partition the other app works.
    const held = keys[published.findIndex((r) => theirs.has(r.partition))];
    state.gated.add(held);
    await waitFor(() => state.started.includes(held), 'the held handler to start');

    const seenAtSettle = here
      .get(EventrailConsumers)
      .settled()
      .then(() => [...state.handled]);
    state.gate.release();
    expect((await seenAtSettle).sort()).toEqual(keys.map((k) => `workers:${k}`).sort());
  });

  it('resolves when a partition is taken here after the wait began, already at its target, without a commit', async () => {
    // A group that starts at the end takes a partition at its last entry and commits nothing: nothing else tells the wait.
    const app = await start({ partitions: 1 }, []);
    const [{ offset: target }] = await app.get(EventrailPublisher).publishMany(jobs(['a']));
    let taken = false;
    let asked = 0;
    const late: SettlingGroup = {
      name: 'late',
      localCommitted: () => {
        asked++;
        return taken ? target : undefined;
      },
      onCommit: () => () => undefined,
    };
    const settling = waitUntilSettled(app.get(EventrailRedis), [late], Promise.resolve(), 5_000);
    // Once the wait has looked at Redis for it (nothing committed there), the partition is taken here.
    await waitFor(() => asked >= 3, 'the wait to check the partition');
    taken = true;
    await expect(settling).resolves.toBeUndefined();
  });

  it('checks its options, resolves at once without groups, and rejects when the consumers never run', async () => {
    const app = await start({ autoStart: false });
    const consumers = app.get(EventrailConsumers);
    await expect(consumers.settled({ timeotMs: 5 } as never)).rejects.toThrow(InvalidOptionError);
    await expect(consumers.settled({ timeotMs: 5 } as never)).rejects.toThrow(
      /settled\.timeotMs: got an unknown option \(did you mean timeoutMs\?\)/,
    );
    await expect(consumers.settled({ timeoutMs: 0 })).rejects.toThrow(InvalidOptionError);
    await expect(consumers.settled({ timeoutMs: 50 })).rejects.toMatchObject({ name: 'SettleTimeoutError', notRunning: true });

    const empty = await start({}, []);
    await empty.get(EventrailConsumers).settled({ timeoutMs: 1 });
  });
});
