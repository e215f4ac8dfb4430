import { Injectable, INestApplicationContext } from '@nestjs/common';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, NodeStatus, OnEvent } from '../../lib';
import { createApp } from '../support/app';
import { waitFor } from '../support/helpers';
import { RedisCluster, startRedisCluster } from '../support/redis-cluster';

const handled = new Set<string>();

@Injectable()
class Worker {
  @OnEvent('tick', { group: 'workers', concurrency: 4, lockTtlMs: 3_000, heartbeatTtlMs: 3_000 })
  handle(message: EventrailMessage): void {
    handled.add(message.id);
  }
}

/**
 * Failover on a real cluster: while a producer publishes with
 * `durability: 'replicated'` and two workers consume, the primary holding
 * some partitions is killed with SIGKILL. Its replica takes over; publishing
 * and consuming resume without restarting the apps, and every publish that
 * resolved (so a replica had it) is handled at least once.
 */
describe('Redis Cluster failover', () => {
  let cluster: RedisCluster;
  const apps: INestApplicationContext[] = [];

  const boot = async (): Promise<INestApplicationContext> => {
    const app = await createApp(
      {
        redis: { cluster: { nodes: cluster.startupNodes } },
        prefix: 'failover',
        partitions: 6,
        durability: 'replicated',
        replication: { replicas: 1, timeoutMs: 1_000 },
      },
      [Worker],
    );
    apps.push(app);
    return app;
  };

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    await cluster?.stop();
  });

  it('recovers from a killed primary: replica promoted, publishing and consuming resume, nothing confirmed is lost', async () => {
    const producer = await boot();
    await boot();
    const publisher = producer.get(EventrailPublisher);
    const admin = producer.get(EventrailAdmin);

    const resolved: Array<{ id: string; partition: number; at: number }> = [];
    let rejected = 0;
    let producing = true;
    const produce = (async () => {
      for (let n = 0; producing; n++) {
        try {
          const result = await publisher.publish('tick', { n }, { key: `key-${n % 60}` });
          resolved.push({ id: result.id, partition: result.partition, at: Date.now() });
        } catch {
          rejected++;
          await new Promise((resolve) => setTimeout(resolve, 20)); // the producer backs off while the cluster fails over
        }
      }
    })();

    await waitFor(
      () => handled.size >= 200,
      () => `warm-up: ${handled.size} handled`,
      30_000,
    );
    const before: NodeStatus[] = await admin.nodes();
    const victim = before.find((n) => n.partitions.length > 0) as NodeStatus;
    const victimNode = cluster.nodes.find((n) => `127.0.0.1:${n.port}` === victim.node);
    expect(victimNode).toBeDefined();
    const killedAt = Date.now();
    victimNode!.kill('SIGKILL');

    // The replica is promoted: the victim's partitions now live on another primary.
    const after = await waitFor(
      async () => {
        const nodes = await admin.nodes().catch(() => undefined);
        const owner = nodes?.find((n) => n.partitions.includes(victim.partitions[0]));
        return owner && owner.node !== victim.node ? nodes : undefined;
      },
      'replica promoted',
      30_000,
    );
    const promotedAt = Date.now();
    // The old primary comes back as a replica of the new one, so replicated writes can be confirmed again.
    await victimNode!.restart();

    // Publishing resumes on the failed-over partitions, and what is published there is handled.
    const countAtPromotion = resolved.length;
    const resumed = await waitFor(
      () => resolved.slice(countAtPromotion).find((r) => victim.partitions.includes(r.partition) && handled.has(r.id)),
      () => `a publish to partitions ${victim.partitions.join(',')} resolved and handled (${rejected} rejected so far)`,
      60_000,
    );
    producing = false;
    await produce;

    await waitFor(
      () => resolved.every((r) => handled.has(r.id)),
      () => `${resolved.filter((r) => !handled.has(r.id)).length} of ${resolved.length} resolved publishes not handled yet`,
      60_000,
    );
    const recoveredMs = resumed.at - killedAt;
    console.log(
      `failover: killed ${victim.node} (partitions ${victim.partitions.join(',')}); replica promoted after ${promotedAt - killedAt} ms; ` +
        `first replicated publish to those partitions handled ${recoveredMs} ms after the kill; ` +
        `${resolved.length} publishes resolved, all handled; ${rejected} rejected during the failover`,
    );
    expect(after?.map((n) => n.node)).not.toContain(victim.node);
    expect(resolved.length).toBeGreaterThan(countAtPromotion);
  });
});
