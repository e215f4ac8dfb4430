import { INestApplicationContext, Injectable, Provider } from '@nestjs/common';
import Redis from 'ioredis';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { EventrailAdmin, EventrailPublisher, InvalidOptionError, OnEvent } from '../../lib';
import { EventrailLagMetricsModule, registerLagMetrics, type LagMetrics } from '../../lib/prometheus';
import { createApp } from '../support/app';
import { startRedisServer } from '../support/redis-server';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { parseExposition, promtoolProblems, promtoolUnavailable, type Sample, valueOf } from './exposition';
import { monitorOf } from '../support/monitor';

// The fleet-wide lag gauges: read from Redis with no worker of the group running, exact, at a cost per
// scrape that depends only on the number of groups and partitions, and the same series from any process.

const EVENT = 'lag.tick';

/** A handler provider per group, so one app runs a worker of each. */
function workersOf(groups: readonly string[]): Provider[] {
  return groups.map((group) => {
    @Injectable()
    class Worker {
      @OnEvent(EVENT, group)
      handle(): void {}
    }
    return Worker;
  });
}

const promtool = promtoolUnavailable();
if (promtool) console.warn(`Checking the exposition with the built-in parser only: ${promtool}`);

describe('fleet-wide lag gauges', () => {
  let redis: Redis;
  let prefix: string;
  const apps: INestApplicationContext[] = [];
  const exporters: LagMetrics[] = [];

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('lagx');
  });
  afterEach(async () => {
    for (const exporter of exporters.splice(0)) exporter.stop();
    for (const app of apps.splice(0)) await app.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  async function start(partitions: number, groups: readonly string[], client?: Redis): Promise<INestApplicationContext> {
    const app = await createApp({ prefix, partitions, ...(client ? { redis: client } : {}) }, workersOf(groups));
    apps.push(app);
    return app;
  }

  /** Runs a worker of each group until all of them committed one entry in every partition, then stops it: the groups exist, no worker runs. */
  async function groupsWithoutWorkers(partitions: number, groups: readonly string[]): Promise<EventrailPublisher> {
    const app = await start(partitions, groups);
    const publisher = app.get(EventrailPublisher);
    for (let p = 0; p < partitions; p++) await publisher.publish(EVENT, { p }, { partition: p });
    const admin = app.get(EventrailAdmin);
    await waitFor(async () => {
      const status = await admin.groups();
      return status.length === groups.length && status.every((g) => g.lag === 0 && g.partitions.every((p) => p.committed !== null));
    }, 'every group caught up in every partition');
    await app.close();
    apps.splice(apps.indexOf(app), 1);
    // A process with the module and no handlers: an exporter, not a worker.
    return (await start(partitions, [])).get(EventrailPublisher);
  }

  async function scrape(registry: Registry): Promise<Sample[]> {
    const text = await registry.metrics();
    if (!promtool) expect(promtoolProblems(text)).toBeNull();
    return parseExposition(text);
  }

  it("reports a group's exact lag, parked messages, members and useful workers with no worker running, in one scrape", async () => {
    const publisher = await groupsWithoutWorkers(4, ['billing', 'mailer']);
    const perPartition = [5, 0, 3, 1];
    for (const [p, count] of perPartition.entries())
      for (let i = 0; i < count; i++) await publisher.publish(EVENT, { i }, { partition: p });

    const registry = new Registry();
    exporters.push(registerLagMetrics(apps[0].get(EventrailAdmin), { registry }));
    const samples = await scrape(registry);
    for (const group of ['billing', 'mailer']) {
      expect(valueOf(samples, 'eventrail_group_lag', { group })).toBe(9);
      expect(valueOf(samples, 'eventrail_group_parked', { group })).toBe(0);
      expect(valueOf(samples, 'eventrail_group_backlog', { group })).toBe(9);
      expect(valueOf(samples, 'eventrail_group_members', { group })).toBe(0);
      expect(valueOf(samples, 'eventrail_group_useful_workers', { group })).toBe(3);
      expect(valueOf(samples, 'eventrail_group_partitions', { group })).toBe(4);
      expect(valueOf(samples, 'eventrail_group_dead_letters', { group })).toBe(0);
      expect(valueOf(samples, 'eventrail_parked_messages', { group })).toBe(0);
      expect(valueOf(samples, 'eventrail_parked_oldest_age_seconds', { group })).toBe(0);
    }
    // Only what was asked for, and nothing per process: the group is the only label.
    expect(new Set(samples.flatMap((s) => Object.keys(s.labels)))).toEqual(new Set(['group']));
    expect(samples).toHaveLength(18);

    // The next scrape sees the next entry: nothing is cached between scrapes without refreshMs.
    await publisher.publish(EVENT, {}, { partition: 1 });
    const next = await scrape(registry);
    expect(valueOf(next, 'eventrail_group_lag', { group: 'mailer' })).toBe(10);
    expect(valueOf(next, 'eventrail_group_useful_workers', { group: 'mailer' })).toBe(4);
  });

  it('exports only the listed groups, and leaves out a listed group that never registered', async () => {
    await groupsWithoutWorkers(2, ['billing', 'mailer']);
    const registry = new Registry();
    exporters.push(registerLagMetrics(apps[0].get(EventrailAdmin), { registry, groups: ['mailer', 'not-yet'] }));
    const samples = await scrape(registry);
    expect([...new Set(samples.map((s) => s.labels.group))]).toEqual(['mailer']);
  });

  it('exports the same series, with the same values, from every process, and each once per registry', async () => {
    const publisher = await groupsWithoutWorkers(2, ['billing']);
    await publisher.publish(EVENT, {}, { partition: 1 });
    const other = await start(2, []); // a second process with the module, as a replica would be
    const [one, two] = [new Registry(), new Registry()];
    exporters.push(registerLagMetrics(apps[0].get(EventrailAdmin), { registry: one }));
    // Registered twice on one registry (two modules in one app): the gauges are reused, never doubled.
    exporters.push(registerLagMetrics(apps[0].get(EventrailAdmin), { registry: one }));
    exporters.push(registerLagMetrics(other.get(EventrailAdmin), { registry: two }));
    const [first, second] = [await scrape(one), await scrape(two)];
    expect(first).toEqual(second);
    expect(first.filter((s) => s.name === 'eventrail_group_lag')).toEqual([
      { name: 'eventrail_group_lag', labels: { group: 'billing' }, value: 1 },
    ]);
  });

  it('with refreshMs, reads Redis on its schedule and answers scrapes from the latest read', async () => {
    const publisher = await groupsWithoutWorkers(2, ['billing']);
    const registry = new Registry();
    exporters.push(registerLagMetrics(apps[0].get(EventrailAdmin), { registry, refreshMs: 100 }));
    await waitFor(async () => valueOf(await scrape(registry), 'eventrail_group_lag', { group: 'billing' }) === 0, 'the first read');
    await publisher.publish(EVENT, {}, { partition: 0 });
    await waitFor(async () => valueOf(await scrape(registry), 'eventrail_group_lag', { group: 'billing' }) === 1, 'a scheduled read');
  });

  it('with refreshMs, stops answering from its last read when Redis fails, rather than repeating a number that stopped moving', async () => {
    const server = await startRedisServer();
    let app: INestApplicationContext | undefined;
    try {
      const seed = await createApp({ redis: server.url, prefix, partitions: 1 }, workersOf(['billing']));
      await seed.get(EventrailPublisher).publish(EVENT, {});
      await waitFor(async () => (await seed.get(EventrailAdmin).groups())[0]?.partitions[0].committed, 'billing committed');
      await seed.close();
      app = await createApp({ redis: server.url, prefix, partitions: 1 });
      const registry = new Registry();
      exporters.push(registerLagMetrics(app.get(EventrailAdmin), { registry, refreshMs: 50 }));
      await waitFor(async () => valueOf(await scrape(registry), 'eventrail_group_members', { group: 'billing' }) === 0, 'a scheduled read');
      await server.stop();
      // Once a scheduled read failed, a scrape reads Redis itself, and fails with it.
      await waitFor(
        () =>
          registry.metrics().then(
            () => false,
            () => true,
          ),
        'a scrape that fails while Redis is down',
      );
    } finally {
      for (const exporter of exporters.splice(0)) exporter.stop();
      await app?.close().catch(() => undefined);
      await server.stop();
    }
  });

  it('as a Nest module (register and registerAsync), registers the gauges at startup and removes them at shutdown', async () => {
    const publisher = await groupsWithoutWorkers(2, ['billing']);
    await publisher.publish(EVENT, {}, { partition: 1 });
    const [sync, async] = [new Registry(), new Registry()];
    const app = await createApp(
      { prefix, partitions: 2 },
      [],
      [
        EventrailLagMetricsModule.register({ registry: sync, refreshMs: 60_000 }),
        EventrailLagMetricsModule.registerAsync({ useFactory: () => Promise.resolve({ registry: async, groups: ['billing'] }) }),
      ],
    );
    apps.push(app);
    expect(valueOf(await scrape(sync), 'eventrail_group_backlog', { group: 'billing' })).toBe(1);
    expect(valueOf(await scrape(async), 'eventrail_group_backlog', { group: 'billing' })).toBe(1);
    expect(() => EventrailLagMetricsModule.register({ refreshMs: 1.5 })).toThrow(/lagMetrics\.refreshMs/);
    // Closed: the gauges leave the registries with the app, so nothing answers from its last read or its closed connection.
    await app.close();
    apps.splice(apps.indexOf(app), 1);
    expect(await sync.getMetricsAsJSON()).toEqual([]);
    expect(await async.getMetricsAsJSON()).toEqual([]);
  });

  it('refuses options it cannot use, naming them', async () => {
    const app = await start(1, []);
    const admin = app.get(EventrailAdmin);
    expect(() => registerLagMetrics(admin, { groups: [] })).toThrow(InvalidOptionError);
    expect(() => registerLagMetrics(admin, { groups: ['ok', ''] })).toThrow(/lagMetrics\.groups\[1\]/);
    expect(() => registerLagMetrics(admin, { refreshMs: -1 })).toThrow(/lagMetrics\.refreshMs/);
    expect(() => registerLagMetrics(admin, { prefix: 'bad-prefix' })).toThrow(/lagMetrics\.prefix/);
    expect(() => registerLagMetrics(admin, { refreshMS: 5 } as never)).toThrow(/did you mean refreshMs/);
  });

  describe('cost per scrape', () => {
    /** Commands this connection sent while `work` ran, as MONITOR saw them (script-internal ones are not the connection's). */
    async function commandsOf(client: Redis, work: () => Promise<unknown>): Promise<string[]> {
      const address = /\baddr=(\S+)/.exec((await client.client('INFO')) as string)![1];
      const monitor = await monitorOf(redis);
      const seen: string[] = [];
      const marker = `end-of-scrape-${prefix}`;
      let ended = false;
      monitor.on('monitor', (_time: string, args: string[], source: string) => {
        if (source !== address) return;
        if (args[0].toLowerCase() === 'echo' && args[1] === marker) ended = true;
        else if (!ended) seen.push(args[0].toLowerCase());
      });
      try {
        await work();
        await client.echo(marker);
        await waitFor(() => ended, 'MONITOR to show the end of the scrape');
      } finally {
        monitor.disconnect();
      }
      return seen;
    }

    it('is stated, as measured below, in the README and the autoscaling page', () => {
      for (const page of ['README.md', 'docs/operations/autoscaling.md']) {
        expect([page, readFileSync(join(__dirname, '../..', page), 'utf8').includes('1 + G × (6 + 5 P)')]).toEqual([page, true]);
      }
      expect(readFileSync(join(__dirname, '../../docs/operations/autoscaling.md'), 'utf8')).toContain('G × (7 + 5 P) for a listed set');
    });

    it.each([
      [1, 1],
      [2, 4],
      [8, 64],
    ])('is 1 + G x (6 + 5 P) commands for %i group(s) of %i partition(s), sent at once', async (g, p) => {
      const groups = Array.from({ length: g }, (_, i) => `group-${i}`);
      await groupsWithoutWorkers(p, groups);
      const client = new Redis(testRedisUrl());
      try {
        const app = await start(p, [], client);
        const registry = new Registry();
        exporters.push(registerLagMetrics(app.get(EventrailAdmin), { registry }));
        await registry.metrics(); // loads the lag script on this connection (EVAL once)
        const started = performance.now();
        await registry.metrics();
        const ms = performance.now() - started;
        const commands = await commandsOf(client, () => registry.metrics());
        const counts: Record<string, number> = {};
        for (const command of commands) counts[command] = (counts[command] ?? 0) + 1;
        console.log(
          `lag scrape, ${g} group(s) x ${p} partition(s): ${commands.length} commands in ${ms.toFixed(1)} ms ${JSON.stringify(counts)}`,
        );
        expect(commands.length).toBe(1 + g * (6 + 5 * p));
        // One O(1) lag read per partition, whatever the lag: no entry is read.
        expect(counts.evalsha).toBe(g * p);
        expect(counts.xrange ?? 0).toBe(0);

        // A listed set of groups: each is first checked to exist.
        const listed = new Registry();
        exporters.push(registerLagMetrics(app.get(EventrailAdmin), { registry: listed, groups }));
        expect(await commandsOf(client, () => listed.metrics())).toHaveLength(g * (7 + 5 * p));
      } finally {
        for (const exporter of exporters.splice(0)) exporter.stop();
        for (const app of apps.splice(0)) await app.close();
        client.disconnect();
      }
    });
  });
});
