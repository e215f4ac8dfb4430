import { Injectable, INestApplicationContext, Logger } from '@nestjs/common';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import Redis from 'ioredis';
import {
  ArchiveOptions,
  EventrailAdmin,
  EventrailMessage,
  EventrailPublisher,
  EventrailRetention,
  OnEvent,
  PublishResult,
  UnknownGroupError,
} from '../../lib';
import { readEntry } from '../../lib/wire/codec';
import { derivedEventId } from '../../lib/wire/event-id';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

interface Seen {
  id: string;
  key: string | null;
  n: number;
  publishedAt: number;
  headers: Record<string, string>;
  partition: number;
}
const seen: Record<'a' | 'b', Seen[]> = { a: [], b: [] };
const record = (group: 'a' | 'b', m: EventrailMessage<{ n: number }>): void => {
  seen[group].push({ id: m.id, key: m.key, n: m.data.n, publishedAt: m.publishedAt.getTime(), headers: m.headers, partition: m.partition });
};

@Injectable()
class GroupA {
  @OnEvent('order.placed', 'a')
  handle(m: EventrailMessage<{ n: number }>): void {
    record('a', m);
  }
}

@Injectable()
class GroupB {
  @OnEvent('order.placed', 'b')
  handle(m: EventrailMessage<{ n: number }>): void {
    record('b', m);
  }
}

describe('retention: archive to the file system, trim, restore', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let dir: string;
  let apps: INestApplicationContext[] = [];
  const start = async (archive: ArchiveOptions, providers: unknown[] = [GroupA, GroupB]): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, partitions: 2, retention: { enabled: false, maxLen: 0, archive } }, providers as never[]);
    apps.push(app);
    return app;
  };
  const publish = (app: INestApplicationContext, count: number): Promise<PublishResult[]> =>
    app.get(EventrailPublisher).publishMany(
      Array.from({ length: count }, (_, n) => ({
        event: 'order.placed',
        data: { n },
        key: `order-${n % 5}`,
        headers: n % 2 ? { traceparent: `00-${String(n).padStart(32, '0')}-${'1'.repeat(16)}-01` } : undefined,
      })),
    );
  const committedAll = async (published: PublishResult[], groups: string[]): Promise<boolean> => {
    for (const p of [0, 1]) {
      const last = published.filter((r) => r.partition === p).at(-1)?.offset;
      if (last === undefined) continue;
      for (const group of groups) if ((await redis.get(keys.offset(group, p))) !== last) return false;
    }
    return true;
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(async () => {
    prefix = uniquePrefix('reta');
    keys = new EventrailKeys(prefix, 2);
    dir = await mkdtemp(join(tmpdir(), 'eventrail-archive-'));
    seen.a.length = 0;
    seen.b.length = 0;
  });
  afterEach(async () => {
    jest.restoreAllMocks();
    await Promise.all(apps.map((a) => a.close()));
    apps = [];
    await deletePrefix(redis, prefix);
    await rm(dir, { recursive: true, force: true });
  });
  afterAll(() => redis.disconnect());

  it('a progress listener that throws, called by EventrailRetention itself: the run covers every partition, the restore every object, and each answers', async () => {
    const app = await start({ driver: 'fs', dir, maxEntriesPerObject: 4 });
    const published = await publish(app, 25);
    await waitFor(() => committedAll(published, ['a', 'b']), 'commits');
    const retention = app.get(EventrailRetention);
    const calls: number[] = [];
    const throwing = (done: number): void => {
      calls.push(done);
      throw new Error('the output went away\n[Nest] forged line');
    };
    const result = await retention.runOnce({ onProgress: throwing });
    expect(calls).toEqual([1]);
    expect(result.partitions.map((p) => p.trimmed).reduce((a, b) => a + b, 0)).toBe(25);
    expect([await redis.xlen(keys.stream(0)), await redis.xlen(keys.stream(1))]).toEqual([0, 0]);
    const names = result.partitions.flatMap((p) => p.archived.map((o) => o.name));
    calls.length = 0;
    await expect(retention.restoreArchive('b', names, { onProgress: throwing })).resolves.toBe(25);
    expect(calls).toEqual([1]);
    // Not a function: refused before anything is done.
    await expect(retention.runOnce({ onProgress: 5 as never })).rejects.toThrow(/onProgress/);
  });

  it('archives entries as gzipped JSONL named by partition and id range before trimming, and restores them for one group', async () => {
    const app = await start({ driver: 'fs', dir, maxEntriesPerObject: 4 });
    const published = await publish(app, 25);
    await waitFor(() => seen.a.length === 25 && seen.b.length === 25, 'first pass');
    await waitFor(() => committedAll(published, ['a', 'b']), 'commits');
    const firstPass = [...seen.b];

    const retention = app.get(EventrailRetention);
    const result = await retention.runOnce();
    const archived = result.partitions.flatMap((p) => p.archived);
    for (const p of result.partitions) {
      const offsets = published.filter((r) => r.partition === p.partition).map((r) => r.offset);
      // Consecutive objects of at most 4 entries covering the partition, each named by its first and last id.
      expect(p.archived.map((o) => o.count).reduce((a, b) => a + b, 0)).toBe(offsets.length);
      expect(p.archived.every((o) => o.count <= 4)).toBe(true);
      expect(p.archived.map((o) => [o.firstId, o.lastId])).toEqual(
        p.archived.map((_, i) => [offsets[i * 4], offsets[Math.min(i * 4 + 3, offsets.length - 1)]]),
      );
      for (const o of p.archived) expect(o.name).toBe(`${prefix}/p${p.partition}/${o.firstId}_${o.lastId}.jsonl.gz`);
      expect(p.trimmed).toBe(offsets.length);
      expect(await redis.xlen(keys.stream(p.partition))).toBe(0);
    }

    // One line per entry: its stream id and fields, as the stream holds them (a lean entry has no id field).
    const object = archived[0];
    const lines = gunzipSync(await readFile(join(dir, ...object.name.split('/'))))
      .toString('utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { partition: number; id: string; fields: Record<string, string> });
    const original = published.find((r) => r.offset === object.firstId)!;
    expect(lines[0]).toEqual({
      partition: object.partition,
      id: object.firstId,
      fields: expect.objectContaining({ event: 'order.placed', key: expect.stringMatching(/^order-/) }),
    });
    const decoded = readEntry(lines[0].id, Object.entries(lines[0].fields).flat(), { partition: object.partition, logTag: keys.logTag });
    expect(decoded).toMatchObject({ id: original.id });
    expect(lines).toHaveLength(object.count);

    // Nothing new: nothing archived twice.
    const again = await retention.runOnce();
    expect(again.partitions.flatMap((p) => p.archived)).toEqual([]);
    // Listed by partition, then id: the order the cycle wrote them in.
    expect((await retention.listArchives()).map((o) => o.name)).toEqual(archived.map((o) => o.name));

    // Restore everything for b: b handles the events again as they were; a skips them.
    const restored = await app.get(EventrailAdmin).restoreArchive(
      'b',
      archived.map((o) => o.name),
    );
    expect(restored).toBe(25);
    await waitFor(
      () => seen.b.length === 50,
      () => `b handled ${seen.b.length}/50`,
    );
    const byId = (list: Seen[]) => [...list].sort((x, y) => (x.id < y.id ? -1 : 1));
    expect(byId(seen.b.slice(25))).toEqual(byId(firstPass));
    for (const key of ['order-0', 'order-3']) {
      expect(
        seen.b
          .slice(25)
          .filter((s) => s.key === key)
          .map((s) => s.n),
      ).toEqual(firstPass.filter((s) => s.key === key).map((s) => s.n));
    }
    const appended = await Promise.all([0, 1].map((p) => redis.xrevrange(keys.stream(p), '+', '-', 'COUNT', 1)));
    await waitFor(async () => {
      for (const p of [0, 1]) if ((await redis.get(keys.offset('a', p))) !== appended[p][0][0]) return false;
      return true;
    }, 'a commits past the restored entries');
    expect(seen.a).toHaveLength(25);

    await expect(retention.restoreArchive('nobody', archived[0].name)).rejects.toBeInstanceOf(UnknownGroupError);
  });

  it('restores a range by id across archive objects, keeping id and time for entries that had none', async () => {
    const app = await start({ driver: 'fs', dir, maxEntriesPerObject: 3 }, [GroupB]);
    // A producer that writes only the required fields.
    const foreign: string[] = [];
    for (let n = 0; n < 7; n++)
      foreign.push((await redis.xadd(keys.stream(0), '*', 'event', 'order.placed', 'data', JSON.stringify({ n })))!);
    await waitFor(() => seen.b.length === 7, 'first pass');
    await waitFor(async () => (await redis.get(keys.offset('b', 0))) === foreign[6], 'commit');
    const result = await app.get(EventrailRetention).runOnce();
    expect(result.partitions[0].archived.map((o) => o.count)).toEqual([3, 3, 1]);

    const restored = await app.get(EventrailRetention).restoreArchive('b', { partition: 0, from: foreign[2], to: foreign[4] });
    expect(restored).toBe(3);
    await waitFor(
      () => seen.b.length === 10,
      () => `b handled ${seen.b.length}/10`,
    );
    expect(seen.b.slice(7).map((s) => [s.id, s.n, s.publishedAt])).toEqual(
      [2, 3, 4].map((n) => [derivedEventId(keys.logTag, 0, foreign[n]), n, Number(foreign[n].split('-')[0])]),
    );
  });

  it('trims nothing when the archive cannot be written, and logs why', async () => {
    const file = join(dir, 'not-a-directory');
    await writeFile(file, 'x');
    const error = jest.spyOn(Logger.prototype, 'error');
    const app = await start({ driver: 'fs', dir: join(file, 'archive') }, []);
    await publish(app, 6);
    const result = await app.get(EventrailRetention).runOnce();
    const withEntries = result.partitions.filter((p) => p.requestedMinId !== null);
    expect(withEntries.length).toBeGreaterThan(0);
    for (const p of withEntries) {
      expect(p.minId).not.toBeNull();
      expect(p).toMatchObject({ archived: [], trimmed: 0, error: expect.stringContaining('archive to fs:') });
    }
    expect((await redis.xlen(keys.stream(0))) + (await redis.xlen(keys.stream(1)))).toBe(6);
    expect(await redis.exists(keys.archived(0), keys.archived(1))).toBe(0);
    expect(error.mock.calls.map(([message]) => String(message)).filter((m) => m.includes('nothing trimmed'))).toHaveLength(
      withEntries.length,
    );
  });
});
