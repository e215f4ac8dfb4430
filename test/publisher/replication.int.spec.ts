import Redis from 'ioredis';
import { INestApplicationContext } from '@nestjs/common';
import { EventrailPublisher, InvalidPublishOptionsError, ReplicationTimeoutError } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

describe("durability: 'replicated'", () => {
  const keys = new EventrailKeys('repl', 1);
  let primary: RedisServer;
  let replica: RedisServer | undefined;
  let app: INestApplicationContext;

  beforeAll(async () => {
    primary = await startRedisServer(undefined, ['--repl-diskless-sync-delay', '0']);
    app = await createApp({ redis: primary.url, prefix: keys.prefix, replication: { replicas: 1, timeoutMs: 1000 } });
  });
  afterAll(async () => {
    await app.close();
    await replica?.stop();
    await primary.stop();
  });

  it('rejects with ReplicationTimeoutError when no replica confirms, naming what was appended', async () => {
    const publisher = app.get(EventrailPublisher);
    const error = await publisher.publish('order.placed', { n: 1 }, { durability: 'replicated' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ReplicationTimeoutError);
    expect(error).toMatchObject({ confirmed: 0, required: 1, timeoutMs: 1000 });
    const appended = (error as ReplicationTimeoutError).appended;
    expect(appended).toHaveLength(1);
    // Appended on the primary all the same: the error says so rather than pretending otherwise.
    const client = new Redis(primary.url);
    expect(await client.xrange(keys.stream(0), appended[0].offset, appended[0].offset)).toHaveLength(1);
    client.disconnect();
    // Acknowledged durability (the default) does not wait.
    expect((await publisher.publish('order.placed', { n: 2 })).partition).toBe(0);
    await expect(publisher.publish('x', {}, { durability: 'sometimes' as never })).rejects.toBeInstanceOf(InvalidPublishOptionsError);
  });

  it('resolves once a replica confirmed, for publish and publishMany', async () => {
    replica = await startRedisServer(undefined, ['--replicaof', '127.0.0.1', String(primary.port)]);
    const replicaClient = new Redis(replica.url);
    await waitFor(async () => /master_link_status:up/.test(await replicaClient.info('replication')), 'replica in sync');
    const publisher = app.get(EventrailPublisher);
    const one = await publisher.publish('order.placed', { n: 3 }, { durability: 'replicated' });
    const many = await publisher.publishMany(
      [1, 2, 3].map((n) => ({ event: 'order.placed', data: { n } })),
      { durability: 'replicated' },
    );
    // WAIT returned only after the replica had them: they are readable there now.
    expect(await replicaClient.xrange(keys.stream(0), one.offset, one.offset)).toHaveLength(1);
    expect(await replicaClient.xrange(keys.stream(0), many[2].offset, many[2].offset)).toHaveLength(1);
    replicaClient.disconnect();
  });
});
