import { INestApplicationContext, Injectable } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, InvalidOptionError, OnEvent } from '../../lib';
import { EventrailHealthIndicator, EventrailHealthModule, EventrailHealthOptions, GroupHealth } from '../../lib/health';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

// maxParkedAgeMs: a parked head that has been failing too long puts its group down, naming the partition and key.

const dependency = { down: new Set<string>(), handled: [] as string[] };

@Injectable()
class Payments {
  // Long redelivery tiers: a parked head stays parked until the test retries it.
  @OnEvent('payment.made', {
    group: 'payments',
    ordering: 'key',
    maxRetries: 1,
    retryBackoffMs: 5,
    retryBackoffMaxMs: 10,
    redelivery: { delayMs: 600_000, factor: 2, maxDelayMs: 600_000, maxAgeMs: 3_600_000 },
  })
  handle(message: EventrailMessage<{ key: string }>): void {
    if (dependency.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    dependency.handled.push(message.data.key);
  }
}

interface Report {
  status: 'up' | 'down';
  message?: string;
  groups?: Record<string, GroupHealth>;
}

describe('EventrailHealthIndicator with maxParkedAgeMs', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('hlthpark');
    Object.assign(dependency, { down: new Set(), handled: [] });
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('is down, naming group, partition and key, once a parked head fails longer than the limit; up again once it is handled', async () => {
    app = await createApp({ prefix }, [Payments], [TerminusModule, EventrailHealthModule]);
    const indicator = app.get(EventrailHealthIndicator);
    const admin = app.get(EventrailAdmin);
    const check = async (options?: EventrailHealthOptions): Promise<Report> =>
      (await indicator.isHealthy('eventrail', options)).eventrail as Report;

    dependency.down.add('A');
    const [head] = await app.get(EventrailPublisher).publishMany([
      { event: 'payment.made', data: { key: 'A' }, key: 'A' },
      { event: 'payment.made', data: { key: 'A' }, key: 'A' },
      { event: 'payment.made', data: { key: 'B' }, key: 'B' },
    ]);
    await waitFor(async () => (await admin.parkedKeys('payments')).some((line) => line.count === 2), 'A parked, 2 deep');
    await waitFor(() => dependency.handled.includes('B'), 'B handled');

    // A generous limit, and no limit at all: up, with the parked messages in the details.
    const generous = await waitFor(async () => {
      const report = await check({ maxParkedAgeMs: 600_000 });
      return report.status === 'up' ? report : null;
    }, 'up within a generous limit');
    expect(generous.groups?.payments).toMatchObject({ status: 'up', lag: 0, parked: 2, problems: [] });
    expect((await check()).status).toBe('up');

    const down = await waitFor(async () => {
      const report = await check({ maxParkedAgeMs: 100 });
      return report.status === 'down' ? report : null;
    }, 'down once the head failed for 100 ms');
    const problem = new RegExp(
      `^partition 0 key "A": parked head ${head.offset} has been failing for \\d+ ms \\(since [0-9T:.-]+Z\\), over maxParkedAgeMs 100$`,
    );
    expect(down.groups?.payments.problems).toEqual([expect.stringMatching(problem)]);
    expect(down.message).toMatch(/^payments: partition 0 key "A": parked head /);

    dependency.down.delete('A');
    await admin.retryParked('payments', { key: 'A' });
    await waitFor(() => dependency.handled.filter((key) => key === 'A').length === 2, 'A handled once back');
    const healed = await waitFor(async () => {
      const report = await check({ maxParkedAgeMs: 100 });
      return report.status === 'up' ? report : null;
    }, 'up once nothing is parked');
    expect(healed.groups?.payments).toMatchObject({ parked: 0, problems: [] });
  });

  it('refuses a maxParkedAgeMs that is not an integer >= 0', async () => {
    app = await createApp({ prefix }, [Payments], [TerminusModule, EventrailHealthModule]);
    const indicator = app.get(EventrailHealthIndicator);
    await expect(indicator.isHealthy('eventrail', { maxParkedAgeMs: -1 })).rejects.toThrow(InvalidOptionError);
    await expect(indicator.isHealthy('eventrail', { maxParkedAgeMs: 1.5 })).rejects.toThrow(/maxParkedAgeMs/);
  });
});
