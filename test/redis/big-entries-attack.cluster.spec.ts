import { INestApplicationContext } from '@nestjs/common';
import { Cluster } from 'ioredis';
import { EventrailPublisher } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { eventNear, indexMismatch, publishEveryWay, publishPastRunLimits, targetNear } from '../support/big-entries-attack';
import { uniquePrefix } from '../support/helpers';
import { RedisCluster, startRedisCluster } from '../support/redis-cluster';
import { seededRandom } from '../support/seeded-random';

/**
 * The big-entries attack of big-entries-attack.int.spec.ts on a 3-primary Redis Cluster, where a
 * `publishMany` goes as one pipeline of runs per partition (queueAppendMany, queueAppendManyDedup)
 * and lone big publishes through the door's queueAppend: every entry over the line by the rule is in
 * its partition's index, and none at or under it.
 */
describe('the index of big entries on a Redis Cluster, against the entries read back', () => {
  const partitions = 6;
  let cluster: RedisCluster;
  let client: Cluster;
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
    client = new Cluster(cluster.startupNodes);
  });
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });
  afterAll(async () => {
    client?.disconnect();
    await cluster?.stop();
  });

  it.each([
    ['dedup on', 60_000],
    ['dedup off', 0],
  ])(
    'indexes exactly the big entries of 2 seeds x 600 events within bytes of the line, every way, %s',
    async (_, dedupWindowMs) => {
      const problems: string[] = [];
      const edge = { onTheLine: 0, justOver: 0 };
      for (let seed = 1; seed <= 2; seed++) {
        const prefix = uniquePrefix(`bigcluster${seed}`);
        const app = await createApp({
          redis: { cluster: { nodes: cluster.startupNodes } },
          prefix,
          partitions,
          maxPayloadBytes: 1024 * 1024,
          dedupWindowMs,
        });
        apps.push(app);
        const random = seededRandom(7000 + dedupWindowMs + seed);
        const events = Array.from({ length: 600 }, (_, n) => eventNear(random, n, targetNear(random), partitions, true));
        const publisher = app.get(EventrailPublisher);
        await publishEveryWay(publisher, events, random);
        if (seed === 1) await publishPastRunLimits(publisher, random, partitions, events.length);
        const keys = new EventrailKeys(prefix, partitions);
        for (let p = 0; p < partitions; p++) {
          const { missing, extra, big, onTheLine, justOver } = await indexMismatch(client, keys, p);
          edge.onTheLine += onTheLine;
          edge.justOver += justOver;
          if (missing.length > 0) problems.push(`seed ${seed} p${p}: ${missing.length} of ${big} big not indexed: ${missing.slice(0, 3)}`);
          if (extra.length > 0) problems.push(`seed ${seed} p${p}: ${extra.length} indexed not big: ${extra.slice(0, 3)}`);
        }
      }
      expect(problems).toEqual([]);
      expect(edge.onTheLine).toBeGreaterThan(5);
      expect(edge.justOver).toBeGreaterThan(5);
    },
    120_000,
  );
});
