import { Injectable, INestApplicationContext, Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { key: string; n: number };

const dependency = {
  down: new Set<string>(),
  handled: [] as string[],
  call(message: EventrailMessage<Data>): void {
    if (this.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    this.handled.push(`${message.data.key}${message.data.n}`);
  },
};

const FAST = {
  maxRetries: 0,
  retryBackoffMs: 5,
  retryBackoffMaxMs: 10,
  redelivery: { delayMs: 40, factor: 2, maxDelayMs: 200, maxAgeMs: 600_000 },
} as const;

@Injectable()
class ByKey {
  @OnEvent('account.changed', { group: 'deploy', ordering: 'key', ...FAST })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

@Injectable()
class ByPartition {
  @OnEvent('account.changed', { group: 'deploy', ordering: 'partition', ...FAST })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

@Injectable()
class Unordered {
  @OnEvent('account.changed', { group: 'deploy', ordering: 'unordered', ...FAST })
  handle(message: EventrailMessage<Data>): void {
    dependency.call(message);
  }
}

// A rolling deploy that changes a group's `ordering`: members of the old and the new setting take the
// partition from one another. Parked messages are neither lost nor overtaken by later messages of their key.
describe('parked keys across a change of ordering', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];

  const start = async (provider: unknown): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix }, [provider as never]);
    apps.push(app);
    return app;
  };
  const stop = async (app: INestApplicationContext): Promise<void> => {
    apps = apps.filter((a) => a !== app);
    await app.close();
  };
  const publish = (app: INestApplicationContext, names: string[]) =>
    app
      .get(EventrailPublisher)
      .publishMany(names.map((name) => ({ event: 'account.changed', data: { key: name[0], n: Number(name.slice(1)) }, key: name[0] })));
  const parkedCount = async (): Promise<number> => {
    const fields = await redis.hgetall(keys.recovery('deploy', 0));
    return Object.entries(fields)
      .filter(([field]) => field.startsWith('park:'))
      .reduce((sum, [, value]) => sum + (JSON.parse(value) as { ids: string[] }).ids.length, 0);
  };
  const handledOf = (key: string) => dependency.handled.filter((name) => name.startsWith(key));

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked-mixed');
    keys = new EventrailKeys(prefix, 1);
    Object.assign(dependency, { down: new Set(), handled: [] });
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it.each([
    ['partition', ByPartition],
    ['unordered', Unordered],
  ] as const)("a member with ordering '%s' that takes a partition with parked keys redelivers them", async (_ordering, Next) => {
    const first = await start(ByKey);
    dependency.down.add('A');
    await publish(first, ['A1', 'B1', 'A2']);
    await waitFor(async () => handledOf('B').length === 1 && (await parkedCount()) === 2, 'A1 and A2 parked, B1 handled');
    await stop(first);

    dependency.down.delete('A');
    const next = await start(Next);
    await waitFor(() => handledOf('A').length === 2, 'the parked messages handled by the new member');
    expect(handledOf('A')).toEqual(['A1', 'A2']);
    await waitFor(async () => (await parkedCount()) === 0, 'the line released in Redis');
    expect(await next.get(EventrailAdmin).deadLetterCount('deploy')).toBe(0);
  });

  it("a member with ordering 'partition' keeps the later messages of a parked key behind it", async () => {
    const warnings: string[] = [];
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(function (message: unknown) {
      warnings.push(typeof message === 'object' && message !== null ? String((message as { msg?: string }).msg) : String(message));
    });
    try {
      const first = await start(ByKey);
      dependency.down.add('A');
      await publish(first, ['A1', 'B1']);
      await waitFor(async () => handledOf('B').length === 1 && (await parkedCount()) === 1, 'A1 parked, B1 handled');
      await stop(first);

      // A is still down when the member with the other setting takes over, and more of A arrives.
      const next = await start(ByPartition);
      await publish(next, ['A2', 'B2', 'A3']);
      await waitFor(() => handledOf('B').length === 2, 'B2 handled');
      await waitFor(async () => (await parkedCount()) === 3, 'A2 and A3 parked behind A1');
      expect(handledOf('A')).toEqual([]);
      expect(warnings.some((w) => w.includes("works the partition with ordering 'key'"))).toBe(true);

      dependency.down.delete('A');
      await waitFor(() => handledOf('A').length === 3, 'A handled once back');
      expect(handledOf('A')).toEqual(['A1', 'A2', 'A3']);
    } finally {
      warn.mockRestore();
    }
  });

  it("a member with ordering 'partition' that finds nothing parked works as before, with no warning", async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const app = await start(ByPartition);
      dependency.down.add('A');
      await publish(app, ['A1', 'B1']);
      // Retried in place (maxRetries 0: dead-lettered at once), holding the partition: nothing is parked.
      await waitFor(async () => (await app.get(EventrailAdmin).deadLetterCount('deploy')) === 1, 'A1 dead-lettered');
      await waitFor(() => handledOf('B').length === 1, 'B1 handled');
      expect(await parkedCount()).toBe(0);
      const calls = warn.mock.calls.map(([message]) => JSON.stringify(message));
      expect(calls.filter((c) => c.includes('parked'))).toEqual([]);
    } finally {
      warn.mockRestore();
    }
  });
});
