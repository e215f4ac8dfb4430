import { Injectable, INestApplicationContext } from '@nestjs/common';
import { EventrailAdmin, EventrailConsumers, GroupHasLiveMembersError, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { createApp } from '../support/app';
import { waitFor } from '../support/helpers';
import { RedisCluster, startRedisCluster } from '../support/redis-cluster';

@Injectable()
class Keeper {
  @OnEvent('keep.ping', { group: 'keeper', lockTtlMs: 600, heartbeatTtlMs: 600 })
  handle(): void {}
}

/**
 * The group's own keys, its partition keys and the registry live in different
 * slots: the delete's scripts and the heartbeat's registry write must each
 * stay in one slot.
 */
describe('group registry, prune and delete on Redis Cluster', () => {
  const partitions = 6;
  const prefix = 'life';
  const keys = new EventrailKeys(prefix, partitions);
  let cluster: RedisCluster;
  const apps: INestApplicationContext[] = [];
  const boot = async (providers: unknown[]): Promise<INestApplicationContext> => {
    const app = await createApp({ redis: { cluster: { nodes: cluster.startupNodes } }, prefix, partitions }, providers as never[]);
    apps.push(app);
    return app;
  };

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
  });
  afterAll(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
    await cluster?.stop();
  });

  it('prunes a stale group, refuses and force-deletes a live one, and the live one comes back registered', async () => {
    const tool = await boot([]);
    const admin = tool.get(EventrailAdmin);
    const { client } = tool.get(EventrailRedis);
    await client.sadd(keys.groups, 'gone');
    await client.set(keys.seen('gone'), String(Date.now() - 60_000));
    for (let p = 0; p < partitions; p++) await client.set(keys.offset('gone', p), '1-0');
    expect(await admin.pruneStaleGroups({ staleMs: 30_000 })).toEqual(['gone']);
    for (let p = 0; p < partitions; p++) expect(await client.exists(keys.offset('gone', p))).toBe(0);
    expect(await client.sismember(keys.groups, 'gone')).toBe(0);

    const worker = await boot([Keeper]);
    const consumers = worker.get(EventrailConsumers);
    await consumers.whenRunning();
    await client.srem(keys.groups, 'keeper');
    await waitFor(async () => (await client.sismember(keys.groups, 'keeper')) === 1, 'keeper registered again by a heartbeat');
    expect(await admin.pruneStaleGroups({ staleMs: 0 })).toEqual([]);
    await expect(admin.deleteGroup('keeper')).rejects.toBeInstanceOf(GroupHasLiveMembersError);

    await admin.deleteGroup('keeper', { force: true });
    await waitFor(async () => {
      if (consumers.ownership().keeper.length !== partitions || !(await client.sismember(keys.groups, 'keeper'))) return false;
      const offsets = await Promise.all(Array.from({ length: partitions }, (_, p) => client.get(keys.offset('keeper', p))));
      return offsets.every((o) => o !== null) && (await client.sismember(keys.events('keeper'), 'keep.ping')) === 1;
    }, 'keeper back in every partition, registered, with its events');
  });
});
