import { INestApplicationContext, Injectable } from '@nestjs/common';
import Redis from 'ioredis';
import { Registry } from 'prom-client';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent, type PublishResult } from '../../lib';
import { GroupLagReader } from '../../lib/metrics/group-lag.reader';
import { registerLagMetrics, type LagMetrics } from '../../lib/prometheus';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { parseExposition, valueOf } from './exposition';
import { monitorOf } from '../support/monitor';

// Parked messages are behind the committed offsets but not done: the status read, the lag report and the
// gauges must show them as work, with how long their oldest head has been failing.

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
  handle(message: EventrailMessage<{ key: string; n: number }>): void {
    if (dependency.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    dependency.handled.push(`${message.data.key}${message.data.n}`);
  }
}

describe('parked messages in the group status, the lag report and the gauges', () => {
  let redis: Redis;
  let prefix: string;
  const apps: INestApplicationContext[] = [];
  const exporters: LagMetrics[] = [];

  const start = async (client?: Redis, providers: Array<new () => unknown> = [Payments]): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, partitions: 2, ...(client ? { redis: client } : {}) }, providers);
    apps.push(app);
    return app;
  };
  const publish = (app: INestApplicationContext, names: string[]): Promise<PublishResult[]> =>
    app
      .get(EventrailPublisher)
      .publishMany(names.map((name) => ({ event: 'payment.made', data: { key: name[0], n: Number(name.slice(1)) }, key: name[0] })));
  /** Parks A1 with A2 and A3 behind it while B1 is handled; resolves once Redis holds the line and the offsets are at the end. */
  const parkA = async (app: INestApplicationContext): Promise<PublishResult[]> => {
    dependency.down.add('A');
    const published = await publish(app, ['A1', 'A2', 'A3', 'B1']);
    const admin = app.get(EventrailAdmin);
    await waitFor(
      async () => (await admin.parkedKeys('payments')).some((line) => line.key === 'A' && line.count === 3),
      'A parked, 3 deep',
    );
    await waitFor(async () => (await admin.group('payments')).lag === 0 && dependency.handled.includes('B1'), 'offsets at the end');
    return published;
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parklag');
    Object.assign(dependency, { down: new Set(), handled: [] });
  });
  afterEach(async () => {
    for (const exporter of exporters.splice(0)) exporter.stop();
    for (const app of apps.splice(0)) await app.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('counts parked messages per partition and group, and the oldest head failing, until the key is handled', async () => {
    const app = await start();
    const admin = app.get(EventrailAdmin);
    const published = await parkA(app);
    const [line] = await admin.parkedKeys('payments');
    const p = line.partition;

    const status = await waitFor(async () => {
      const read = await admin.group('payments');
      return (read.partitions[p].oldestParked?.failingForMs ?? 0) >= 50 ? read : null;
    }, 'the head failing for 50 ms');
    expect(status).toMatchObject({ lag: 0, parked: 3 });
    expect(status.partitions[p]).toMatchObject({
      lag: 0,
      parked: 3,
      oldestParked: { key: 'A', offset: published[0].offset, firstFailedAt: line.firstFailedAt },
    });
    expect(status.partitions[1 - p]).toMatchObject({ parked: 0, oldestParked: null });

    const lag = await new GroupLagReader(admin).group('payments');
    expect(lag).toMatchObject({ lag: 0, parked: 3, backlog: 3, usefulWorkers: 1 });
    expect(lag.parkedOldestAgeMs).toBeGreaterThanOrEqual(50);

    const registry = new Registry();
    exporters.push(registerLagMetrics(admin, { registry }));
    const scrape = async (): Promise<Record<string, number>> => {
      const samples = parseExposition(await registry.metrics());
      const of = (name: string): number => valueOf(samples, `eventrail_${name}`, { group: 'payments' });
      return {
        parked: of('parked_messages'),
        age: of('parked_oldest_age_seconds'),
        groupParked: of('group_parked'),
        backlog: of('group_backlog'),
        lag: of('group_lag'),
      };
    };
    const gauges = await scrape();
    expect(gauges).toMatchObject({ parked: 3, groupParked: 3, backlog: 3, lag: 0 });
    expect(gauges.age).toBeGreaterThanOrEqual(0.05);

    dependency.down.delete('A');
    await admin.retryParked('payments', { key: 'A' });
    await waitFor(() => dependency.handled.filter((name) => name.startsWith('A')).length === 3, 'A handled once back');
    expect(dependency.handled.filter((name) => name.startsWith('A'))).toEqual(['A1', 'A2', 'A3']);
    await waitFor(async () => (await admin.group('payments')).parked === 0, 'no parked message left');
    expect((await admin.group('payments')).partitions[p]).toMatchObject({ parked: 0, oldestParked: null });
    expect(await scrape()).toEqual({ parked: 0, age: 0, groupParked: 0, backlog: 0, lag: 0 });
  });

  it('costs nothing where nothing is parked, and one HGETALL per partition that holds parked lines', async () => {
    const app = await start();
    const client = new Redis(testRedisUrl());
    try {
      const admin = (await start(client, [])).get(EventrailAdmin);
      await publish(app, ['B1']);
      await waitFor(() => dependency.handled.includes('B1'), 'B1 handled');
      await admin.group('payments'); // loads the lag script on this connection (EVAL once)
      const happy = await commandsOf(client, () => admin.group('payments'));
      await parkA(app);
      const parked = await commandsOf(client, () => admin.group('payments'));
      console.log(`status read, 2 partitions: ${happy.length} commands with nothing parked, ${parked.length} with one partition parked`);
      // 7 + 5 P: SISMEMBER (the group exists), TIME, the members, their info, last seen, SMEMBERS, XLEN; per partition
      // the offset, parkedFloor, the lease, its TTL and the lag read.
      expect(happy).toHaveLength(7 + 5 * 2);
      expect(parked.length).toBe(happy.length + 1);
      expect(parked.filter((c) => c === 'hgetall').length).toBe(happy.filter((c) => c === 'hgetall').length + 1);
    } finally {
      for (const one of apps.splice(1)) await one.close();
      client.disconnect();
    }
  });

  /** Commands `client` sent while `work` ran, as MONITOR saw them. */
  async function commandsOf(client: Redis, work: () => Promise<unknown>): Promise<string[]> {
    const address = /\baddr=(\S+)/.exec((await client.client('INFO')) as string)![1];
    const monitor = await monitorOf(redis);
    const seen: string[] = [];
    const marker = `end-of-read-${prefix}`;
    let ended = false;
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (source !== address) return;
      if (args[0].toLowerCase() === 'echo' && args[1] === marker) ended = true;
      else if (!ended) seen.push(args[0].toLowerCase());
    });
    try {
      await work();
      await client.echo(marker);
      await waitFor(() => ended, 'MONITOR to show the end of the read');
    } finally {
      monitor.disconnect();
    }
    return seen;
  }
});
