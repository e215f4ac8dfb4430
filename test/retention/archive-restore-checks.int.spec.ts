import { Injectable, INestApplicationContext } from '@nestjs/common';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';
import Redis from 'ioredis';
import { ArchiveFormatError, EventrailMessage, EventrailPublisher, EventrailRetention, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { ArchiveRestorer } from '../../lib/retention/archive-restorer';
import { archiveName, encodeArchive } from '../../lib/retention/archive/archive-file';
import { FsArchiveSink } from '../../lib/retention/archive/fs.archive-sink';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const handled: string[] = [];

@Injectable()
class Restored {
  @OnEvent('item', 'restored')
  handle(m: EventrailMessage<unknown>): void {
    handled.push(m.id);
  }
}

interface Line {
  partition: number;
  id: string;
  fields: Record<string, string>;
}

describe('archive restore checks each object, bounds it, and restores overlapping objects once', () => {
  const prefix = uniquePrefix('rstchk');
  const keys = new EventrailKeys(prefix, 2);
  let redis: Redis;
  let dir: string;
  let app: INestApplicationContext;
  /** The entries of partition 0 as XRANGE returns them: what retention would archive. */
  let entries: Array<[string, string[]]>;

  const line = (partition: number, id: string, n = 0): Line => ({ partition, id, fields: { event: 'item', data: JSON.stringify({ n }) } });
  const write = async (name: string, lines: Line[]): Promise<string> => {
    const path = join(dir, ...name.split('/'));
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, gzipSync(lines.map((l) => JSON.stringify(l)).join('\n') + '\n'));
    return name;
  };
  /** Writes entries [from, to] of partition 0 as retention would, under the name of their range. */
  const archive = async (from: number, to: number): Promise<string> => {
    const slice = entries.slice(from, to + 1);
    const name = archiveName(prefix, 0, slice[0][0], slice[slice.length - 1][0]);
    const path = join(dir, ...name.split('/'));
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, await encodeArchive(0, slice));
    return name;
  };
  const logLength = async (): Promise<number> => (await redis.xlen(keys.stream(0))) + (await redis.xlen(keys.stream(1)));
  /** Event ids of the entries appended to partition 0 after `length` entries. */
  const appendedIds = async (length: number): Promise<string[]> =>
    (await redis.xrange(keys.stream(0), '-', '+')).slice(length).map(([, f]) => f[f.indexOf('id') + 1]);
  const restore = (source: string | string[] | { partition?: number }): Promise<number> =>
    app.get(EventrailRetention).restoreArchive('restored', source);

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    dir = await mkdtemp(join(tmpdir(), 'eventrail-restore-checks-'));
    app = await createApp({ prefix, partitions: 2, retention: { enabled: false, maxLen: 0, archive: { driver: 'fs', dir } } }, [Restored]);
    await app
      .get(EventrailPublisher)
      .publishMany(Array.from({ length: 10 }, (_, n) => ({ event: 'item', data: { n }, partition: 0, id: `item-${n}` })));
    await waitFor(() => handled.length === 10, 'the group has handled the originals');
    entries = await redis.xrange(keys.stream(0), '-', '+');
  });
  beforeEach(async () => {
    await rm(join(dir, prefix), { recursive: true, force: true });
  });
  afterAll(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
    await rm(dir, { recursive: true, force: true });
  });

  describe('an object that does not match its name fails with ArchiveFormatError naming it, before anything is appended', () => {
    const ids = () => entries.map(([id]) => id);
    it.each<[string, () => [string, Line[]], string]>([
      [
        'entries of another partition',
        () => [archiveName(prefix, 0, ids()[0], ids()[1]), [line(1, ids()[0]), line(1, ids()[1])]],
        'of partition 1',
      ],
      [
        "a first id that is not the name's",
        () => [archiveName(prefix, 0, ids()[0], ids()[2]), [line(0, ids()[1]), line(0, ids()[2])]],
        'the first entry is',
      ],
      [
        "a last id that is not the name's",
        () => [archiveName(prefix, 0, ids()[0], ids()[3]), [line(0, ids()[0]), line(0, ids()[2])]],
        'the last entry is',
      ],
      [
        "an entry past the name's range",
        () => [archiveName(prefix, 0, ids()[0], ids()[1]), [line(0, ids()[0]), line(0, ids()[5]), line(0, ids()[1])]],
        'is past',
      ],
      [
        'entries out of order',
        () => [archiveName(prefix, 0, ids()[0], ids()[3]), [line(0, ids()[0]), line(0, ids()[2]), line(0, ids()[1]), line(0, ids()[3])]],
        'does not come after',
      ],
      [
        'a repeated entry',
        () => [archiveName(prefix, 0, ids()[0], ids()[1]), [line(0, ids()[0]), line(0, ids()[0]), line(0, ids()[1])]],
        'does not come after',
      ],
      ['no entries', () => [archiveName(prefix, 0, ids()[0], ids()[1]), []], 'has no entries'],
      [
        'the prefix of another log',
        () => [archiveName('another-app', 0, ids()[0], ids()[1]), [line(0, ids()[0]), line(0, ids()[1])]],
        'of the log "another-app"',
      ],
      [
        'a partition this log does not have',
        () => [archiveName(prefix, 7, ids()[0], ids()[1]), [line(7, ids()[0]), line(7, ids()[1])]],
        'partition 7 does not exist',
      ],
    ])('%s', async (_, make, reason) => {
      const good = await archive(0, 4);
      const [name, lines] = make();
      const bad = await write(name, lines);
      const before = await logLength();
      for (const source of [
        [good, bad],
        [bad, good],
      ]) {
        const error = await restore(source).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(ArchiveFormatError);
        expect(error).toMatchObject({ archive: bad });
        expect((error as Error).message).toContain(reason);
        expect(await logLength()).toBe(before);
      }
      if (!name.startsWith('another-app/') && !name.includes('/p7/')) {
        // Selected by range, the same: the good object is not restored either.
        await expect(restore({ partition: 0 })).rejects.toMatchObject({ archive: bad });
        expect(await logLength()).toBe(before);
      }
    });
  });

  it('refuses an object that inflates past the limit (a gzip bomb) with ArchiveFormatError, appending nothing', async () => {
    const limit = 64 * 1024;
    // Valid entries that match the name: only the size is wrong (about 55 KiB of gzip inflating to 1.5 MB).
    const id = (i: number): string => `1-${i}`;
    const count = 20_000;
    const bomb = await write(
      archiveName(prefix, 0, id(0), id(count - 1)),
      Array.from({ length: count }, (_, i) => line(0, id(i))),
    );
    const redisClient = app.get(EventrailRedis);
    const restorer = new ArchiveRestorer(redisClient, new FsArchiveSink(dir), limit);
    const before = await logLength();
    const error = await restorer.restore('restored', bomb).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ArchiveFormatError);
    expect(error).toMatchObject({ archive: bomb });
    expect((error as Error).message).toContain(`inflates past ${limit} bytes`);
    expect(await logLength()).toBe(before);
    // The same object within the limit is restored: the limit is what refused it.
    const small = await write(archiveName(prefix, 1, id(0), id(1)), [line(1, id(0)), line(1, id(1))]);
    expect(await restorer.restore('restored', small)).toBe(2);
  });

  it.each<[string, () => Promise<string[]>, number]>([
    ['overlapping', async () => [await archive(0, 5), await archive(3, 9)], 10],
    ['nested', async () => [await archive(0, 9), await archive(2, 4)], 10],
    ['repeated (one named twice)', async () => [await archive(4, 9), await archive(0, 6), await archive(4, 9)], 10],
  ])('restores each entry once from %s objects', async (_, make, expected) => {
    const names = await make();
    for (const source of [[...names].reverse(), { partition: 0 }]) {
      const length = await redis.xlen(keys.stream(0));
      expect(await restore(source)).toBe(expected);
      // Each original event once, in the original order.
      expect(await appendedIds(length)).toEqual(Array.from({ length: expected }, (_, n) => `item-${n}`));
    }
  });
});
