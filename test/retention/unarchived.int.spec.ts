import { INestApplicationContext, Logger } from '@nestjs/common';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Redis from 'ioredis';
import { EventrailPublisher, EventrailRetention, RetentionOptions } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { registerScripts } from '../../lib/redis/scripts';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

/**
 * An instance without the fleet's archive settings (a second app, the CLI, a test harness) runs a cycle
 * on a log that another instance archives: it must not delete what the archive has not saved.
 */
describe('retention without the archive, on an archived log', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let dir: string;
  let apps: INestApplicationContext[] = [];
  const start = async (retention: Partial<RetentionOptions>): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, partitions: 1, retention: { enabled: false, maxLen: 0, ...retention } });
    apps.push(app);
    return app;
  };
  const ids = async (): Promise<string[]> => (await redis.xrange(keys.stream(0), '-', '+')).map(([id]) => id);
  const publish = async (app: INestApplicationContext, from: number, count: number): Promise<string[]> =>
    (await app.get(EventrailPublisher).publishMany(Array.from({ length: count }, (_, i) => ({ event: 'n', data: { n: from + i } })))).map(
      (r) => r.offset,
    );

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(async () => {
    prefix = uniquePrefix('retu');
    keys = new EventrailKeys(prefix, 1);
    dir = await mkdtemp(join(tmpdir(), 'eventrail-unarchived-'));
  });
  afterEach(async () => {
    jest.restoreAllMocks();
    await Promise.all(apps.map((a) => a.close()));
    apps = [];
    await deletePrefix(redis, prefix);
    await rm(dir, { recursive: true, force: true });
  });
  afterAll(() => redis.disconnect());

  it('trims nothing the archive lacks, says why, and trims it only with allowUnarchivedTrim', async () => {
    const archiving = await start({ archive: { driver: 'fs', dir } });
    const first = await publish(archiving, 0, 5);
    const archived = await archiving.get(EventrailRetention).runOnce();
    expect(archived.partitions[0]).toMatchObject({ trimmed: 5, archived: [expect.objectContaining({ count: 5, lastId: first[4] })] });
    const fresh = await publish(archiving, 5, 5);

    const warn = jest.spyOn(Logger.prototype, 'warn');
    const bare = await start({});
    const result = await bare.get(EventrailRetention).runOnce();
    expect(result.partitions[0]).toMatchObject({
      trimmed: 0,
      error: expect.stringMatching(/entries from \S+ on are not archived \(this log is archived to fs:.*allowUnarchivedTrim/),
    });
    expect(await ids()).toEqual(fresh);
    expect(warn.mock.calls.map(([m]) => String(m)).filter((m) => m.includes('are not archived'))).toHaveLength(1);

    const allowed = await start({ allowUnarchivedTrim: true });
    expect((await allowed.get(EventrailRetention).runOnce()).partitions[0]).toMatchObject({ trimmed: 5 });
    expect(await ids()).toEqual([]);
  });

  it('trims what some archive has and keeps the rest', async () => {
    // An approximate trim removes whole stream nodes only: the five oldest are archived and stay in the stream.
    const archiving = await start({ archive: { driver: 'fs', dir }, maxLen: 5, approximate: true });
    const offsets = await publish(archiving, 0, 10);
    expect((await archiving.get(EventrailRetention).runOnce()).partitions[0]).toMatchObject({
      trimmed: 0,
      archived: [expect.objectContaining({ count: 5, lastId: offsets[4] })],
    });
    const unsaved = offsets.slice(5);

    const [partition] = (await (await start({})).get(EventrailRetention).runOnce()).partitions;
    expect(partition).toMatchObject({ trimmed: 5, error: expect.stringContaining('not archived') });
    expect(await ids()).toEqual(unsaved);
  });

  it('trim script: without a sink, refuses past every archive mark unless told otherwise', async () => {
    const client = registerScripts(redis);
    for (let i = 1; i <= 6; i++) await redis.xadd(keys.stream(0), `${i}-0`, 'event', 'n', 'data', '{}');
    const trim = (minId: string, ...allow: string[]) =>
      (client.eventrailTrimLog as unknown as (...args: string[]) => Promise<number>).call(
        client,
        keys.stream(0),
        keys.archived(0),
        keys.bigEntries(0),
        minId,
        '=',
        '',
        ...allow,
      );
    expect(await trim('2-0')).toBe(1); // never archived: a plain trim
    await redis.hset(keys.archived(0), 'fs:/old', '3-0', 's3:aws/new/', '4-0');
    expect(await trim('6-0')).toBe(-2); // 5-0 is in no archive (an old caller, without the fourth argument)
    expect(await trim('6-0', '0')).toBe(-2);
    expect(await ids()).toEqual(['2-0', '3-0', '4-0', '5-0', '6-0']);
    expect(await trim('5-0', '0')).toBe(3); // up to the highest mark: archived to s3
    expect(await trim('7-0', '1')).toBe(2); // allowed
  });
});
