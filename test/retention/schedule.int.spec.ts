import { INestApplicationContext } from '@nestjs/common';
import { ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import Redis from 'ioredis';
import {
  EventrailModule,
  EventrailPublisher,
  EventrailRetention,
  InvalidOptionError,
  RetentionOptions,
  ScheduleModuleMissingError,
} from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

describe('retention: scheduled through @nestjs/schedule', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];
  const boot = async (retention: RetentionOptions, { schedule = true, client }: { schedule?: boolean; client?: Redis } = {}) => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        ...(schedule ? [ScheduleModule.forRoot()] : []),
        EventrailModule.forRoot({ redis: client ?? testRedisUrl(), prefix, retention }),
      ],
    }).compile();
    const app = await moduleRef.init();
    apps.push(app);
    return app;
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('rets');
    keys = new EventrailKeys(prefix, 1);
  });
  afterEach(async () => {
    await Promise.all(apps.map((a) => a.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('fails startup with ScheduleModuleMissingError when retention is enabled and ScheduleModule.forRoot() is not imported', async () => {
    // The app's own client: a failed init runs no shutdown hooks, so nothing would close one eventrail created.
    const client = new Redis(testRedisUrl());
    try {
      const failure = await boot({ enabled: true, maxLen: 10 }, { schedule: false, client }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(ScheduleModuleMissingError);
      expect((failure as ScheduleModuleMissingError).reason).toBe('not-imported');
      expect((failure as Error).message).toContain('ScheduleModule.forRoot()');

      // Disabled, it needs no scheduler, and a cycle still runs on demand.
      const app = await boot({ enabled: false, maxLen: 0 }, { schedule: false, client });
      await app.get(EventrailPublisher).publish('n', {});
      expect((await app.get(EventrailRetention).runOnce()).partitions[0].trimmed).toBe(1);
    } finally {
      client.disconnect();
    }
  });

  it('registers an interval job in SchedulerRegistry that trims on its own, and removes it on shutdown', async () => {
    const app = await boot({ enabled: true, every: '200ms', maxLen: 3 });
    const registry = app.get(SchedulerRegistry);
    const name = app.get(EventrailRetention).jobName;
    expect(registry.getIntervals()).toContain(name);
    await app.get(EventrailPublisher).publishMany(Array.from({ length: 10 }, (_, n) => ({ event: 'n', data: { n } })));
    await waitFor(async () => (await redis.xlen(keys.stream(0))) === 3, 'a scheduled trim to 3 entries');
    await app.close();
    apps = [];
    expect(registry.doesExist('interval', name)).toBe(false);
  });

  it('runs on a cron expression', async () => {
    const app = await boot({ enabled: true, every: '* * * * * *', maxLen: 1 });
    expect([...app.get(SchedulerRegistry).getCronJobs().keys()]).toContain(app.get(EventrailRetention).jobName);
    await app.get(EventrailPublisher).publishMany(Array.from({ length: 5 }, (_, n) => ({ event: 'n', data: { n } })));
    await waitFor(async () => (await redis.xlen(keys.stream(0))) === 1, 'a cron trim to 1 entry');
  });

  it('refuses an invalid cron expression at startup, naming retention.every', async () => {
    const client = new Redis(testRedisUrl());
    try {
      const failure = await boot({ enabled: true, every: '* * * * 99', maxLen: 1 }, { client }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(InvalidOptionError);
      expect((failure as InvalidOptionError).option).toBe('retention.every');
    } finally {
      client.disconnect();
    }
  });
});
