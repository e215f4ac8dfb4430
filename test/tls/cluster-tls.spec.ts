import { Injectable, INestApplicationContext } from '@nestjs/common';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent, RedisUnavailableError } from '../../lib';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisCluster, startRedisCluster } from '../support/redis-cluster';
import { makeTlsFiles, TlsFiles } from '../support/tls-certs';

const handled = new Set<number>();

@Injectable()
class Worker {
  @OnEvent('tls.tick', { group: 'tls-cluster-workers', concurrency: 6 })
  handle(message: EventrailMessage<{ n: number }>): void {
    handled.add(message.data.n);
  }
}

/** Redis Cluster over TLS (clients, cluster bus and replication): 3 primaries, 3 replicas, a throwaway CA. */
describe('Redis Cluster with TLS', () => {
  let files: TlsFiles;
  let cluster: RedisCluster;
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    files = await makeTlsFiles();
    cluster = await startRedisCluster(3, files);
  }, 120_000);
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    await cluster?.stop();
    files?.remove();
  });

  const over = (ca: string) => ({ cluster: { nodes: cluster.startupNodes, options: { redisOptions: { tls: { ca } } } } });

  it('publishes into partitions on every primary and consumes them, over TLS', async () => {
    const app = await createApp({ redis: over(files.read(files.caCert)), prefix: uniquePrefix('ctls'), partitions: 6 }, [Worker]);
    apps.push(app);
    const publisher = app.get(EventrailPublisher);
    await publisher.publishMany(Array.from({ length: 60 }, (_, n) => ({ event: 'tls.tick', data: { n }, key: `k-${n}` })));
    await waitFor(
      () => handled.size === 60,
      () => `60 handled, got ${handled.size}`,
      30_000,
    );
    const nodes = await app.get(EventrailAdmin).nodes();
    expect(nodes).toHaveLength(3);
    expect(nodes.every((n) => n.partitions.length > 0)).toBe(true);
  });

  // Known gap: ioredis's Cluster drops its nodes' own connection errors, so a wrong CA is not recognised as a TLS
  // failure there and startup fails only after startupTimeoutMs ("Failed to refresh slots cache."), unlike a single Redis.
  it('with a wrong CA startup fails within startupTimeoutMs', async () => {
    const start = createApp({
      redis: over(files.read(files.otherCaCert)),
      prefix: uniquePrefix('ctls'),
      partitions: 6,
      startupTimeoutMs: 1_500,
    });
    await expect(start).rejects.toThrow(RedisUnavailableError);
  });
});
