import { Injectable, INestApplicationContext } from '@nestjs/common';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, EventrailRetention, OnEvent, partitionForKey } from '../../lib';
import { createApp } from '../support/app';
import { waitFor } from '../support/helpers';
import { RedisCluster, startRedisCluster } from '../support/redis-cluster';

type Data = { key: string; n: number };

const PARTITIONS = 6;
const down = new Set<string>();
const handled: string[] = [];

@Injectable()
class Accounts {
  @OnEvent('account.changed', {
    group: 'accounts',
    ordering: 'key',
    maxRetries: 1,
    retryBackoffMs: 5,
    redelivery: { delayMs: 40, maxDelayMs: 200 },
  })
  handle(message: EventrailMessage<Data>): void {
    if (down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    handled.push(`${message.data.key}${message.data.n}`);
  }
}

/**
 * Parked keys on a real 3-master Redis Cluster: a partition's parked lines sit in its recovery hash,
 * under the partition's hash tag, so the commit script that writes them with the offset touches one slot.
 */
describe('parked keys on Redis Cluster', () => {
  let cluster: RedisCluster;
  const apps: INestApplicationContext[] = [];
  const prefix = 'pk';

  const boot = async (): Promise<INestApplicationContext> => {
    const app = await createApp(
      { redis: { cluster: { nodes: cluster.startupNodes } }, prefix, partitions: PARTITIONS, retention: { enabled: false, maxLen: 0 } },
      [Accounts],
    );
    apps.push(app);
    return app;
  };
  const publish = (app: INestApplicationContext, names: string[]) =>
    app
      .get(EventrailPublisher)
      .publishMany(names.map((name) => ({ event: 'account.changed', data: { key: name[0], n: Number(name.slice(1)) }, key: name[0] })));
  const handledOf = (key: string) => handled.filter((name) => name.startsWith(key));

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
  });
  afterAll(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
    await cluster?.stop();
  });

  it('parks a key, lets the others go on, keeps the line through retention and a takeover, then handles it in order', async () => {
    const first = await boot();
    down.add('A');
    const names = ['A1', 'B1', 'C1', 'A2', 'D1', 'E1', 'A3', 'F1', 'G1'];
    const published = await publish(first, names);
    await waitFor(() => handled.length === 6, 'every key but A handled');
    const admin = first.get(EventrailAdmin);
    await waitFor(async () => (await admin.parkedKeys('accounts'))[0]?.count === 3, "A's three messages parked");
    const [line] = await admin.parkedKeys('accounts');
    expect(line).toMatchObject({
      key: 'A',
      partition: partitionForKey('A', PARTITIONS),
      offset: published[0].offset,
      eventId: published[0].id,
    });

    // Retention down to nothing keeps A's messages: its line holds the log back.
    await first.get(EventrailRetention).runOnce();
    const remaining = await admin.readLog(line.partition, { count: 100 });
    expect(remaining.entries.map((e) => e.offset)).toEqual(
      expect.arrayContaining([published[0].offset, published[3].offset, published[6].offset]),
    );
    // It did trim: a partition with nothing parked is empty now.
    const other = published.find((r) => r.partition !== line.partition)!;
    expect((await admin.readLog(other.partition, { count: 100 })).entries).toEqual([]);

    // Another process takes over where this one left off.
    await first.close();
    apps.splice(apps.indexOf(first), 1);
    down.delete('A');
    const second = await boot();
    await waitFor(() => handledOf('A').length === 3, 'A handled by the new owner');
    expect(handledOf('A')).toEqual(['A1', 'A2', 'A3']);
    await waitFor(async () => (await second.get(EventrailAdmin).parkedKeys('accounts')).length === 0, 'the line released');
  });
});
