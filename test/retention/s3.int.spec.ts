import { Injectable, INestApplicationContext } from '@nestjs/common';
import { GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { gunzipSync } from 'node:zlib';
import Redis from 'ioredis';
import { EventrailMessage, EventrailPublisher, EventrailRetention, OnEvent, PublishResult, S3ArchiveOptions } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { S3_CREDENTIALS, S3TestServer, startGatedProxy, startS3Server } from '../support/s3-server';

const seen: Record<'a' | 'b', Array<{ id: string; key: string | null; n: number; publishedAt: number }>> = { a: [], b: [] };

@Injectable()
class GroupA {
  @OnEvent('order.placed', 'a')
  handle(m: EventrailMessage<{ n: number }>): void {
    seen.a.push({ id: m.id, key: m.key, n: m.data.n, publishedAt: m.publishedAt.getTime() });
  }
}

@Injectable()
class GroupB {
  @OnEvent('order.placed', 'b')
  handle(m: EventrailMessage<{ n: number }>): void {
    seen.b.push({ id: m.id, key: m.key, n: m.data.n, publishedAt: m.publishedAt.getTime() });
  }
}

describe('retention: archive to S3-compatible storage (s3rver), trim, restore', () => {
  let redis: Redis;
  let s3: S3TestServer;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];
  const archive = (overrides: Partial<S3ArchiveOptions> = {}): S3ArchiveOptions => ({
    driver: 's3',
    bucket: s3.bucket,
    prefix: 'backups',
    endpoint: s3.endpoint,
    region: 'us-east-1',
    credentials: S3_CREDENTIALS,
    ...overrides,
  });
  const start = async (options: S3ArchiveOptions, providers: unknown[] = []): Promise<INestApplicationContext> => {
    const app = await createApp(
      { prefix, partitions: 2, retention: { enabled: false, maxLen: 0, archive: options } },
      providers as never[],
    );
    apps.push(app);
    return app;
  };
  const publish = (app: INestApplicationContext, count: number): Promise<PublishResult[]> =>
    app
      .get(EventrailPublisher)
      .publishMany(Array.from({ length: count }, (_, n) => ({ event: 'order.placed', data: { n }, key: `order-${n % 4}` })));
  const length = async (): Promise<number> => (await redis.xlen(keys.stream(0))) + (await redis.xlen(keys.stream(1)));

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    s3 = await startS3Server();
  });
  beforeEach(() => {
    prefix = uniquePrefix('ret3');
    keys = new EventrailKeys(prefix, 2);
    seen.a.length = 0;
    seen.b.length = 0;
  });
  afterEach(async () => {
    await Promise.all(apps.map((a) => a.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(async () => {
    redis.disconnect();
    await s3?.stop();
  });

  it('uploads, verifies, trims, and restores the archived events for one group only', async () => {
    const app = await start(archive(), [GroupA, GroupB]);
    const published = await publish(app, 20);
    await waitFor(() => seen.a.length === 20 && seen.b.length === 20, 'first pass');
    const last = (p: number) => published.filter((r) => r.partition === p).at(-1)?.offset ?? null;
    await waitFor(async () => {
      for (const p of [0, 1]) for (const g of ['a', 'b']) if (last(p) && (await redis.get(keys.offset(g, p))) !== last(p)) return false;
      return true;
    }, 'commits');

    const result = await app.get(EventrailRetention).runOnce();
    const archived = result.partitions.flatMap((p) => p.archived);
    expect(archived.reduce((sum, o) => sum + o.count, 0)).toBe(20);
    expect(result.partitions.reduce((sum, p) => sum + p.trimmed, 0)).toBe(20);
    expect(await length()).toBe(0);

    // In the bucket under the configured key prefix, one gzipped JSONL line per entry.
    const listed = await s3.client.send(new ListObjectsV2Command({ Bucket: s3.bucket, Prefix: `backups/${prefix}/` }));
    expect((listed.Contents ?? []).map((o) => o.Key).sort()).toEqual(archived.map((o) => `backups/${o.name}`).sort());
    const object = await s3.client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: `backups/${archived[0].name}` }));
    const lines = gunzipSync(Buffer.from(await object.Body!.transformToByteArray()))
      .toString('utf8')
      .trim()
      .split('\n');
    expect(lines).toHaveLength(archived[0].count);
    expect(JSON.parse(lines[0])).toMatchObject({
      partition: archived[0].partition,
      id: archived[0].firstId,
      fields: { event: 'order.placed' },
    });

    // Restore the whole range for a: a handles each event again with its id, key and time; b does not.
    const firstPass = [...seen.a];
    expect(await app.get(EventrailRetention).restoreArchive('a', { from: new Date(0) })).toBe(20);
    await waitFor(
      () => seen.a.length === 40,
      () => `a handled ${seen.a.length}/40`,
    );
    const sorted = (list: typeof firstPass) => [...list].sort((x, y) => (x.id < y.id ? -1 : 1));
    expect(sorted(seen.a.slice(20))).toEqual(sorted(firstPass));
    const tips = await Promise.all([0, 1].map(async (p) => (await redis.xrevrange(keys.stream(p), '+', '-', 'COUNT', 1))[0]?.[0] ?? null));
    await waitFor(async () => {
      for (const p of [0, 1]) if (tips[p] && (await redis.get(keys.offset('b', p))) !== tips[p]) return false;
      return true;
    }, 'b commits past the restored entries');
    expect(seen.b).toHaveLength(20);
  });

  it('trims nothing when the upload fails (no such bucket)', async () => {
    const app = await start(archive({ bucket: 'no-such-bucket' }));
    await publish(app, 8);
    const result = await app.get(EventrailRetention).runOnce();
    const attempted = result.partitions.filter((p) => p.minId !== null);
    expect(attempted.length).toBeGreaterThan(0);
    for (const p of attempted) expect(p).toMatchObject({ trimmed: 0, archived: [], error: expect.stringContaining('no-such-bucket') });
    expect(await length()).toBe(8);
  });

  it('runs one cycle at a time across instances: the second instance skips while the first is uploading', async () => {
    const proxy = await startGatedProxy(s3.endpoint);
    try {
      const first = await start(archive({ endpoint: proxy.endpoint }));
      const second = await start(archive({ endpoint: proxy.endpoint }));
      await first
        .get(EventrailPublisher)
        .publishMany(Array.from({ length: 5 }, (_, n) => ({ event: 'order.placed', data: { n }, partition: 0 })));

      const runs = [first, second].map((app) => app.get(EventrailRetention).runOnce());
      // Whichever took the lock is held at its upload; the other finds the lock taken and returns at once.
      await waitFor(() => proxy.held() === 1, 'an upload held at the proxy');
      const loser = await Promise.race(runs);
      expect(loser.ran).toBe(false);
      expect(proxy.held()).toBe(1);
      proxy.open();
      const results = await Promise.all(runs);
      expect(results.map((r) => r.ran).sort()).toEqual([false, true]);
      const winner = results.find((r) => r.ran)!;
      expect(winner.partitions[0]).toMatchObject({ trimmed: 5, archived: [expect.objectContaining({ count: 5 })] });
      expect(proxy.puts()).toBe(1);
      expect(await redis.exists(keys.retentionLock())).toBe(0);
    } finally {
      await Promise.all(apps.map((a) => a.close()));
      apps = [];
      await proxy.close();
    }
  });
});
