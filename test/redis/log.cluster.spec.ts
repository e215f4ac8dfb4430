import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Injectable, INestApplicationContext } from '@nestjs/common';
import { HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Cluster } from 'ioredis';
import {
  EventrailAdmin,
  EventrailConsumers,
  EventrailMessage,
  EventrailModuleOptions,
  EventrailPublisher,
  EventrailRetention,
  NonRetryableError,
  OnEvent,
} from '../../lib';
import { EventrailHealthIndicator, EventrailHealthModule } from '../../lib/health';
import { EventrailScripts } from '../../lib/redis/eventrail-scripts';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { waitFor } from '../support/helpers';
import { RedisCluster, startRedisCluster } from '../support/redis-cluster';

type Data = { key: string; seq: number; bad?: boolean };

/** Every handling, in the order handlers started, across all apps of this test process. */
const log: Array<{ group: string; app: number; id: string; key: string; seq: number }> = [];
let current = 0;

@Injectable()
class Orders {
  /** Which app of the test this instance belongs to (providers are created when the app is compiled). */
  private readonly app = current;

  @OnEvent('order.step', { group: 'orders', concurrency: 4 })
  async step(message: EventrailMessage<Data>): Promise<void> {
    log.push({ group: 'orders', app: this.app, id: message.id, key: message.data.key, seq: message.data.seq });
    await new Promise((resolve) => setImmediate(resolve));
  }
}

@Injectable()
class Audit {
  private readonly app = current;

  @OnEvent('order.step', { group: 'audit', enableIdempotency: true })
  record(message: EventrailMessage<Data>): void {
    if (message.data.bad) throw new NonRetryableError('bad step');
    log.push({ group: 'audit', app: this.app, id: message.id, key: message.data.key, seq: message.data.seq });
  }
}

/**
 * The consumer behaviour suite on a real 3-master + 3-replica Redis Cluster:
 * the same code, only the connection option changes.
 */
describe('on Redis Cluster', () => {
  let cluster: RedisCluster;
  const apps: INestApplicationContext[] = [];
  let prefix = 'c0';

  const boot = async (options: EventrailModuleOptions = {}, providers: unknown[] = [Orders, Audit]): Promise<INestApplicationContext> => {
    current = apps.length;
    const app = await createApp(
      { redis: { cluster: { nodes: cluster.startupNodes } }, prefix, partitions: 12, ...options },
      providers as never[],
      [TerminusModule, EventrailHealthModule],
    );
    apps.push(app);
    return app;
  };

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
  });
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
    log.length = 0;
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('spreads the partitions over every master', async () => {
    prefix = 'spread';
    const app = await boot({}, []);
    // Replicas show up in every node's CLUSTER SLOTS once gossip has spread them.
    const nodes = await waitFor(async () => {
      const found = await app.get(EventrailAdmin).nodes();
      return found.every((n) => n.replicas.length === 1) ? found : undefined;
    }, 'every primary listed with its replica');
    expect(nodes).toHaveLength(3);
    for (const node of nodes) {
      expect(node.partitions.length).toBeGreaterThan(0);
      expect(node.replicas).toHaveLength(1);
    }
    expect(nodes.flatMap((n) => n.partitions).sort((a, b) => a - b)).toEqual(Array.from({ length: 12 }, (_, p) => p));
  });

  it('fans out to groups, keeps per-key order with competing workers, and shares the partitions', async () => {
    prefix = 'fanout';
    const first = await boot();
    const second = await boot();
    await waitFor(() => {
      const a = first.get(EventrailConsumers).ownership().orders ?? [];
      const b = second.get(EventrailConsumers).ownership().orders ?? [];
      return a.length === 6 && b.length === 6 && new Set([...a, ...b]).size === 12;
    }, 'the two workers split the 12 partitions');

    const keys = Array.from({ length: 24 }, (_, k) => `key-${k}`);
    const events = keys.flatMap((key) => Array.from({ length: 20 }, (_, seq) => ({ event: 'order.step', data: { key, seq }, key })));
    const published = await first.get(EventrailPublisher).publishMany(events);
    await waitFor(
      () => log.filter((l) => l.group === 'orders').length >= 480 && log.filter((l) => l.group === 'audit').length >= 480,
      () => `handled ${log.length} of 960`,
      60_000,
    );
    for (const group of ['orders', 'audit']) {
      const handled = log.filter((l) => l.group === group);
      expect(new Set(handled.map((l) => l.id)).size).toBe(480);
      expect([...handled.map((l) => l.id)].sort()).toEqual(published.map((p) => p.id).sort());
      for (const key of keys) {
        const seqs = handled.filter((l) => l.key === key).map((l) => l.seq);
        expect(seqs).toEqual(Array.from({ length: 20 }, (_, seq) => seq));
      }
    }
    const byApp = new Set(log.filter((l) => l.group === 'orders').map((l) => l.app));
    expect(byApp).toEqual(new Set([0, 1]));
  });

  it('drains a backlog with packed reads (readBacklog-1) on every primary, in per-key order', async () => {
    prefix = 'backlog';
    const sha = createHash('sha1')
      .update(readFileSync(join(__dirname, '../../lib/redis/scripts/readBacklog-1.lua'), 'utf8'))
      .digest('hex');
    const admin = new Cluster(cluster.startupNodes);
    const loaded = async (): Promise<number[]> =>
      (await Promise.all(admin.nodes('master').map((node) => node.script('EXISTS', sha) as Promise<number[]>))).flat();
    try {
      const publisherOnly = await boot({}, []);
      const keys = Array.from({ length: 24 }, (_, k) => `key-${k}`);
      const events = keys.flatMap((key) => Array.from({ length: 30 }, (_, seq) => ({ event: 'order.step', data: { key, seq }, key })));
      await publisherOnly.get(EventrailPublisher).publishMany(events);
      // The earlier tests' consumers read packed too: start from no script cached, so what loads it is this group.
      await Promise.all(admin.nodes('master').map((node) => node.script('FLUSH')));
      expect(await loaded()).toEqual([0, 0, 0]);

      // 60 entries a partition on average, 10 a read: every partition reads packed after its first read.
      await boot({ consumer: { batchSize: 10 } }, [Audit]);
      await waitFor(
        () => log.filter((l) => l.group === 'audit').length >= events.length,
        () => `handled ${log.length} of ${events.length}`,
        60_000,
      );
      for (const key of keys)
        expect(log.filter((l) => l.key === key).map((l) => l.seq)).toEqual(Array.from({ length: 30 }, (_, seq) => seq));
      expect(await loaded()).toEqual([1, 1, 1]);
    } finally {
      admin.disconnect();
    }
  });

  it('indexes big entries in their partition and reads plain XRANGE between them on every primary, in per-key order', async () => {
    prefix = 'indexed';
    const readRange = EventrailScripts.readRange.bind(EventrailScripts);
    let plain = 0;
    jest.spyOn(EventrailScripts, 'readRange').mockImplementation(async (...args) => {
      const reply = await readRange(...args);
      if (reply.length > 1) plain++;
      return reply;
    });
    const admin = new Cluster(cluster.startupNodes);
    try {
      const publisherOnly = await boot({}, []);
      const publisher = publisherOnly.get(EventrailPublisher);
      const keys = Array.from({ length: 24 }, (_, k) => `key-${k}`);
      // Every fifth step over 16 KiB; lone publishes (one pipeline per partition on a cluster) and publishMany runs.
      const step = (key: string, seq: number) => ({
        event: 'order.step',
        data: { key, seq, pad: seq % 5 === 0 ? 'x'.repeat(20_000) : '' },
        key,
      });
      for (const key of keys) for (let seq = 0; seq < 10; seq++) await publisher.publish('order.step', step(key, seq).data, { key });
      await publisher.publishMany(keys.flatMap((key) => Array.from({ length: 20 }, (_, i) => step(key, 10 + i))));
      const schema = new EventrailKeys(prefix, 12);
      let indexed = 0;
      for (let p = 0; p < 12; p++) {
        const big = (await admin.xrange(schema.stream(p), '-', '+'))
          .filter(([, f]) => f[f.indexOf('data') + 1].length > 20_000)
          .map(([id]) => id);
        expect((await admin.zrange(schema.bigEntries(p), '0', '-1')).sort()).toEqual(big.sort());
        indexed += big.length;
      }
      expect(indexed).toBe(keys.length * 6);

      await boot({}, [Audit]);
      await waitFor(
        () => log.filter((l) => l.group === 'audit').length >= keys.length * 30,
        () => `handled ${log.length} of ${keys.length * 30}`,
        60_000,
      );
      for (const key of keys)
        expect(log.filter((l) => l.key === key).map((l) => l.seq)).toEqual(Array.from({ length: 30 }, (_, seq) => seq));
      expect(plain).toBeGreaterThan(0);
    } finally {
      jest.restoreAllMocks();
      admin.disconnect();
    }
  });

  it('runs dead letters, replay, dedup, idempotency, admin, retention and health on the cluster', async () => {
    prefix = 'features';
    const app = await boot({ dedupWindowMs: 60_000, retention: { enabled: false, maxLen: 0 } });
    const publisher = app.get(EventrailPublisher);
    const admin = app.get(EventrailAdmin);

    const first = await publisher.publish('order.step', { key: 'k1', seq: 0 }, { key: 'k1', id: 'step-1' });
    const again = await publisher.publish('order.step', { key: 'k1', seq: 0 }, { key: 'k1', id: 'step-1' });
    expect(again).toEqual({ ...first, duplicate: true });
    await publisher.publish('order.step', { key: 'k2', seq: 0, bad: true }, { key: 'k2' });
    await waitFor(async () => (await admin.deadLetters('audit')).length === 1, 'one dead letter in audit');

    const [letter] = await admin.deadLetters('audit');
    expect(letter).toMatchObject({ reason: 'non-retryable', key: 'k2' });
    expect(await admin.replayDeadLetters('audit', 'all')).toBe(1);
    await waitFor(async () => (await admin.deadLetters('audit')).length === 1, 'dead-lettered again after the replay (still bad)');
    expect(log.filter((l) => l.group === 'orders' && l.key === 'k2')).toHaveLength(1); // the replay went to audit only

    const groups = await admin.groups();
    expect(groups.map((g) => g.name).sort()).toEqual(['audit', 'orders']);
    await waitFor(async () => (await admin.group('orders')).lag === 0, 'orders caught up');

    const retention = await app.get(EventrailRetention).runOnce();
    expect(retention.ran).toBe(true);
    expect(retention.partitions.reduce((sum, p) => sum + p.trimmed, 0)).toBeGreaterThan(0);

    const health = await app
      .get(HealthCheckService)
      .check([() => app.get(EventrailHealthIndicator).isHealthy('eventrail', { timeoutMs: 5_000 })]);
    expect(health.status).toBe('ok');
    expect((health.info?.eventrail as unknown as { nodes: unknown[] }).nodes).toHaveLength(3);
  });
});
