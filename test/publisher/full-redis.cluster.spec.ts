import { INestApplicationContext } from '@nestjs/common';
import Redis, { Cluster } from 'ioredis';
import { EventrailPublisher, partitionForKey, PublishInput, PublishManyError } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { RedisCluster, startRedisCluster } from '../support/redis-cluster';
import { seededRandom } from '../support/seeded-random';

/**
 * `publishMany` on a Redis Cluster whose primaries are at their `maxmemory`
 * (noeviction): one pipeline per partition, each run of it one command. As
 * on a single Redis, what lands in each partition must be a prefix of what
 * was sent to it, and the error must say per event what landed.
 */
const MAXMEMORY = 32 * 1024 * 1024;
const SHAPE_BYTES = 12 * 1024 * 1024;
const PARTITIONS = 6;

async function usedMemory(node: Redis): Promise<number> {
  return Number(/^used_memory:(\d+)/m.exec(await node.info('memory'))?.[1]);
}

describe('publishMany on a full Redis Cluster', () => {
  const prefix = 'full-cluster';
  const keys = new EventrailKeys(prefix, PARTITIONS);
  let cluster: RedisCluster;
  let client: Cluster;
  /** A direct connection to each primary, and a hash tag of a slot it serves (for its filler keys). */
  let primaries: Array<{ node: Redis; tag: string }>;
  let app: INestApplicationContext;
  let publisher: EventrailPublisher;

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
    client = new Cluster(cluster.startupNodes);
    primaries = [];
    for (const { port, slots } of await cluster.masters()) {
      const node = new Redis(port);
      await node.config('SET', 'maxmemory', String(MAXMEMORY));
      await node.config('SET', 'maxmemory-policy', 'noeviction');
      let i = 0;
      const served = async (tag: string): Promise<boolean> => {
        const slot = Number(await node.call('CLUSTER', 'KEYSLOT', tag));
        return slots.some(([from, to]) => slot >= from && slot <= to);
      };
      while (!(await served(`f${i}`))) i++;
      primaries.push({ node, tag: `f${i}` });
    }
    app = await createApp({ redis: { cluster: { nodes: cluster.startupNodes } }, prefix, partitions: PARTITIONS, dedupWindowMs: 600_000 });
    publisher = app.get(EventrailPublisher);
    // The first publishMany asks (in the background) whether scripts may run; runs go as scripts after it.
    await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n } })));
    await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n } })));
  }, 120_000);
  afterAll(async () => {
    await app?.close();
    client?.disconnect();
    for (const { node } of primaries ?? []) node.disconnect();
    await cluster?.stop();
  });

  /** Deletes the partitions' keys and the filler on every primary, then fills each up to `headroom` below maxmemory. */
  async function fillTo(headroom: number): Promise<void> {
    for (const { node, tag } of primaries) {
      const found: string[] = [];
      for (const pattern of [`{${prefix}:*`, `{${tag}}:*`]) {
        let cursor = '0';
        do {
          const [next, batch] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
          cursor = next;
          found.push(...batch);
        } while (cursor !== '0');
      }
      // One key at a time: they are in different slots.
      for (const key of found) await node.del(key);
      for (let i = 0; ; i++) {
        const missing = MAXMEMORY - headroom - (await usedMemory(node));
        if (missing <= 0) break;
        // A third of what is missing: the command's own argument counts too while it runs.
        await node.set(`{${tag}}:filler:${i}`, 'x'.repeat(Math.min(1024 * 1024, Math.max(1, Math.floor(missing / 3)))));
      }
    }
  }

  async function landed(partition: number): Promise<number[]> {
    const entries = await client.xrange(keys.stream(partition), '-', '+');
    return entries.map(([, fields]) => (JSON.parse(fields[fields.indexOf('data') + 1]) as { n: number }).n);
  }

  it('lands a prefix of each partition and says per event what landed, over 24 generated shapes', async () => {
    let refusedShapes = 0;
    for (let seed = 1; seed <= 24; seed++) {
      const random = seededRandom(seed);
      const size = 1 + Math.floor(random() * 600);
      const payload = Math.min([2_000, 20_000, 40_000][Math.floor(random() * 3)], Math.floor(SHAPE_BYTES / size));
      const dedupShare = [0, 0.3, 1][Math.floor(random() * 3)];
      const headroom = Math.floor(random() * 6 * 1024 * 1024);
      const inputs: PublishInput[] = [];
      for (let n = 0; n < size; n++) {
        const where = random() < 0.6 ? { key: `k${Math.floor(random() * 4)}` } : { partition: Math.floor(random() * PARTITIONS) };
        const id = random() < dedupShare ? { id: `s${seed}-${n}` } : {};
        inputs.push({ event: 'shape', data: { n, pad: 'p'.repeat(Math.floor(payload * (0.5 + random()))) }, ...where, ...id });
      }
      await fillTo(headroom);
      const error = await publisher.publishMany(inputs).then(
        () => undefined,
        (e: unknown) => e,
      );
      const shape = `seed ${seed}: ${size} events of ~${payload} B, dedup ${dedupShare}, headroom ${headroom}`;
      const partitionOf = (input: PublishInput): number =>
        input.key === undefined ? (input.partition ?? 0) : partitionForKey(input.key, PARTITIONS);
      const inStream = new Set<number>();
      for (let p = 0; p < PARTITIONS; p++) {
        const stream = await landed(p);
        for (const n of stream) inStream.add(n);
        const sent = inputs.flatMap((input, n) => (partitionOf(input) === p ? [n] : []));
        expect({ shape, partition: p, stream }).toEqual({ shape, partition: p, stream: sent.slice(0, stream.length) });
      }
      if (error === undefined) {
        expect({ shape, landed: inStream.size }).toEqual({ shape, landed: size });
        continue;
      }
      refusedShapes++;
      expect(error).toBeInstanceOf(PublishManyError);
      const { outcomes } = error as PublishManyError;
      expect({ shape, outcomes }).toEqual({ shape, outcomes: inputs.map((_, n) => (inStream.has(n) ? 'appended' : 'not-appended')) });
    }
    expect(refusedShapes).toBeGreaterThan(5);
  }, 300_000);
});
