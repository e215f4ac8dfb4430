import { Injectable, INestApplicationContext } from '@nestjs/common';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent, RedisTlsError } from '../../lib';
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

  it('fails with RedisTlsError, not at startupTimeoutMs, when the nodes’ certificates are not trusted', async () => {
    // The cluster client drops its nodes' TLS errors; eventrail asks a seed on a plain connection why.
    const start = createApp({
      redis: over(files.read(files.otherCaCert)),
      prefix: uniquePrefix('ctls'),
      partitions: 6,
      startupTimeoutMs: 50_000,
    });
    const error = (await start.catch((e: unknown) => e)) as RedisTlsError;
    expect(error).toBeInstanceOf(RedisTlsError);
    expect(error.code).toBe('SELF_SIGNED_CERT_IN_CHAIN');
  });
});
