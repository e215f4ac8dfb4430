import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { EventrailAdmin, EventrailPublisher, RedisFullError, RetentionOptions } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { assertBuilt, cliEnv, outcome, parseJson, runCli } from '../cli/cli.harness';
import { RedisServer, startRedisServer } from '../support/redis-server';

const OOM = /^OOM command not allowed/;

/**
 * A redis-server of the test's own, filled past its `maxmemory` (noeviction,
 * the policy eventrail requires), so it refuses every command that may grow
 * memory: what frees memory must still run, what cannot must say so.
 */
describe('a full Redis: retention and dead-letter purges free memory, the rest says it is full', () => {
  let server: RedisServer;
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];
  let dir: string;

  const start = async (retention: Partial<RetentionOptions>): Promise<INestApplicationContext> => {
    const app = await createApp({ redis: server.url, prefix, partitions: 2, retention: { enabled: false, ...retention } });
    apps.push(app);
    return app;
  };
  const usedMemory = async (): Promise<number> => Number(/^used_memory:(\d+)/m.exec(await redis.info('memory'))?.[1]);
  /** Appends `count` events of about 1 KiB to both partitions. */
  const fillLog = async (app: INestApplicationContext, count: number): Promise<void> => {
    const publisher = app.get(EventrailPublisher);
    for (let i = 0; i < count; i += 200) {
      await publisher.publishMany(
        Array.from({ length: 200 }, (_, j) => ({ event: 'filler', data: { n: i + j, pad: 'x'.repeat(1024) }, key: `k${i + j}` })),
      );
    }
  };
  /** A registered group with `count` dead letters of about 1 KiB, as a dead-letter sink writes them. */
  const fillDeadLetters = async (group: string, count: number): Promise<void> => {
    await redis.sadd(keys.groups, group);
    const pipeline = redis.pipeline();
    for (let i = 0; i < count; i++)
      pipeline.xadd(
        keys.deadLetters(group),
        '*',
        'event',
        'filler',
        'data',
        'x'.repeat(1024),
        'partition',
        '0',
        'offset',
        `${i + 1}-0`,
        'error',
        'boom',
      );
    await pipeline.exec();
  };
  /** `count` dead letters of `group` as a sink writes them (the original entry's fields, then the failure), data of about `pad` bytes. */
  const sinkLetters = async (group: string, count: number, pad = 1024): Promise<void> => {
    const pipeline = redis.pipeline();
    const now = String(Date.now());
    for (let i = 0; i < count; i++) {
      const original = [
        'id',
        randomUUID(),
        'event',
        'filler',
        'time',
        now,
        'data',
        JSON.stringify({ i, pad: 'x'.repeat(pad) }),
        'key',
        `k${i}`,
      ];
      const failure = ['group', group, 'partition', '0', 'offset', `${i + 1}-0`, 'reason', 'retries-exhausted'];
      const error = ['errorName', 'Error', 'errorMessage', 'boom', 'errorStack', '', 'attempts', '1'];
      const times = ['firstFailedAt', now, 'lastFailedAt', now, 'worker', 'w'];
      pipeline.xadd(keys.deadLetters(group), '*', ...original, ...failure, ...error, ...times);
    }
    await pipeline.exec();
  };
  /**
   * Valkey 8 frees deleted values in a background thread (lazyfree-lazy-user-del yes), so memory a purge frees
   * drops a moment after its reply: waits for that before measuring or probing (on Valkey 8.0 a probe right
   * after a purge of 3000 letters was refused once in CI, with the letters deleted).
   */
  const lazyFreed = async (): Promise<void> => {
    await waitFor(async () => /^lazyfree_pending_objects:0\r?$/m.test(await redis.info('memory')), 'deleted values freed');
  };
  /**
   * Sets maxmemory below what Redis uses now, and checks that a plain write is refused. The margin is wider
   * than what Redis frees on its own (idle clients' query and reply buffers, shrunk by its cron: tens of KB
   * here), which on a slow host could bring it back under maxmemory before the refused operation runs. It
   * stays under what even an empty Redis uses (about 1 MB), so maxmemory never comes out 0 (no limit).
   */
  const makeFull = async (): Promise<void> => {
    await lazyFreed();
    await redis.config('SET', 'maxmemory', String((await usedMemory()) - 512 * 1024));
    await expect(redis.set(`${prefix}:probe`, '1')).rejects.toThrow(OOM);
  };
  const isFull = async (): Promise<boolean> => {
    await lazyFreed();
    return redis.set(`${prefix}:probe`, '1').then(
      () => false,
      (error: Error) => OOM.test(error.message),
    );
  };

  beforeAll(async () => {
    server = await startRedisServer(undefined, ['--maxmemory-policy', 'noeviction']);
    redis = new Redis(server.url);
  });
  beforeEach(async () => {
    prefix = uniquePrefix('full');
    keys = new EventrailKeys(prefix, 2);
    dir = await mkdtemp(join(tmpdir(), 'eventrail-full-'));
  });
  afterEach(async () => {
    await redis.config('SET', 'maxmemory', '0');
    await Promise.all(apps.map((a) => a.close()));
    apps = [];
    // The server is this suite's own.
    await redis.flushall();
    await rm(dir, { recursive: true, force: true });
  });
  afterAll(async () => {
    redis.disconnect();
    await server.stop();
  });

  // Found by helper-84 (a review of the full-Redis refusals): Redis checks maxmemory before each command, so a replay
  // that reaches the limit partway had some claims taken and kept them for 60 s (a replay right after memory was freed
  // passed over those letters), or had its claims taken and some appends refused, and answered a short count as done.
  it('a replay that reaches maxmemory partway throws RedisFullError and keeps no claim: the next replay takes every letter left', async () => {
    const app = await start({});
    const admin = app.get(EventrailAdmin);
    await redis.sadd(keys.groups, 'billing');
    let threw = 0;
    // Limits from a little above what Redis uses to well above it: somewhere in between, the page's claims or its
    // appends cross it partway (where exactly depends on the build's allocator and the client buffers).
    for (const margin of [16, 32, 48, 64, 96, 128, 192, 256, 384, 512].map((kb) => kb * 1024)) {
      const left = await redis.xlen(keys.deadLetters('billing'));
      if (left < 500) await sinkLetters('billing', 500 - left);
      await redis.config('SET', 'maxmemory', String((await usedMemory()) + margin));
      const first = await admin.replayDeadLetters('billing', 'all').catch((error: unknown) => error);
      await redis.config('SET', 'maxmemory', '0');
      const remaining = await redis.xlen(keys.deadLetters('billing'));
      if (first instanceof RedisFullError) {
        threw++;
        // The refusal counts what went through before it: every letter that left the dead-letter stream.
        expect([margin, first.done]).toEqual([margin, 500 - remaining]);
      }
      // Done whole, or refused: never a short count reported as done.
      else expect([margin, first]).toEqual([margin, 500]);
      const second = await admin.replayDeadLetters('billing', 'all');
      expect([margin, second, await redis.xlen(keys.deadLetters('billing'))]).toEqual([margin, remaining, 0]);
    }
    expect(threw).toBeGreaterThan(0);
  });

  it('a replay refused on a later page counts the pages before it in RedisFullError.done', async () => {
    const app = await start({});
    await redis.sadd(keys.groups, 'billing');
    // A page of 500 small letters, then one of 500 letters of 4 KiB: the limit lets the first page through and
    // stops the second partway (a page's letters leave the dead-letter stream only once it is appended).
    await sinkLetters('billing', 500, 16);
    await sinkLetters('billing', 500, 4096);
    await redis.config('SET', 'maxmemory', String((await usedMemory()) + 1024 * 1024));
    const refusal = await app
      .get(EventrailAdmin)
      .replayDeadLetters('billing', 'all')
      .catch((error: unknown) => error);
    await redis.config('SET', 'maxmemory', '0');
    const remaining = await redis.xlen(keys.deadLetters('billing'));
    expect(refusal).toBeInstanceOf(RedisFullError);
    expect((refusal as RedisFullError).done).toBe(1000 - remaining);
    expect((refusal as RedisFullError).done).toBeGreaterThanOrEqual(500);
    expect((refusal as RedisFullError).message).toContain(`refused to replay dead letters after ${1000 - remaining} went through`);
  });

  it('refuses retryParked and giveUpParked with RedisFullError naming the operation, and leaves no command', async () => {
    const app = await start({});
    await redis.sadd(keys.groups, 'billing');
    // A line as a worker stores it: the head of key A failed once and is tried again in a minute.
    const line = { ids: ['1-0', '2-0'], k: 'A', a: 1, f: Date.now(), n: Date.now() + 60_000, e: 'Error: boom', t: '2-0', r: 0, c: 0 };
    await redis.hset(keys.recovery('billing', 1), 'park:k:A', JSON.stringify(line));
    const admin = app.get(EventrailAdmin);
    expect((await admin.parkedKeys('billing')).map((k) => [k.key, k.partition, k.count])).toEqual([['A', 1, 2]]);
    await makeFull();

    await expect(admin.retryParked('billing')).rejects.toThrow(RedisFullError);
    await expect(admin.retryParked('billing', { key: 'A' })).rejects.toThrow(/refused to retry parked lines: OOM command not allowed/);
    await expect(admin.giveUpParked('billing', { key: 'A' })).rejects.toThrow(/refused to give up a parked head: OOM command not allowed/);

    await redis.config('SET', 'maxmemory', '0');
    expect(Object.keys(await redis.hgetall(keys.recovery('billing', 1)))).toEqual(['park:k:A']);
  });

  it('runs a retention cycle (lock, trim, dead-letter trim) and frees the memory', async () => {
    const app = await start({ maxLen: 0, deadLetterMaxLen: 10, approximate: false });
    await fillLog(app, 2000);
    await fillDeadLetters('billing', 200);
    await makeFull();

    const result = await app.get(EventrailAdmin).runRetention();

    expect(result.ran).toBe(true);
    expect(result.partitions.map((p) => p.error)).toEqual([undefined, undefined]);
    expect(result.partitions.reduce((sum, p) => sum + p.trimmed, 0)).toBe(2000);
    expect(result.deadLetters).toEqual([{ group: 'billing', trimmed: 190 }]);
    expect(await redis.exists(keys.retentionLock())).toBe(0);
    expect(await isFull()).toBe(false);
  });

  it('archives before trimming on a full Redis, marks included', async () => {
    const app = await start({ maxLen: 0, approximate: false, archive: { driver: 'fs', dir, maxEntriesPerObject: 500 } });
    await fillLog(app, 2000);
    await makeFull();

    const result = await app.get(EventrailAdmin).runRetention();

    expect(result.partitions.map((p) => p.error)).toEqual([undefined, undefined]);
    const archived = result.partitions.flatMap((p) => p.archived);
    expect(archived.reduce((sum, o) => sum + o.count, 0)).toBe(2000);
    expect(result.partitions.reduce((sum, p) => sum + p.trimmed, 0)).toBe(2000);
    for (const p of result.partitions) {
      expect(await redis.hget(keys.archived(p.partition), `fs:${dir}`)).toBe(p.archived[p.archived.length - 1].lastId);
    }
    expect((await readdir(dir, { recursive: true })).filter((name) => name.endsWith('.jsonl.gz'))).toHaveLength(archived.length);
    expect(await isFull()).toBe(false);

    // A restore appends: on a full Redis it is refused, typed, and appends nothing.
    await redis.sadd(keys.groups, 'billing');
    await makeFull();
    const refusal = await app
      .get(EventrailAdmin)
      .restoreArchive('billing', archived[0].name)
      .catch((error: unknown) => error);
    expect(refusal).toBeInstanceOf(RedisFullError);
    expect(refusal).toMatchObject({ operation: 'restore an archive' });
    expect((await redis.xlen(keys.stream(0))) + (await redis.xlen(keys.stream(1)))).toBe(0);
  });

  it('purges dead letters and frees the memory', async () => {
    const app = await start({});
    await fillDeadLetters('billing', 3000);
    await makeFull();

    expect(await app.get(EventrailAdmin).purgeDeadLetters('billing')).toBe(3000);

    expect(await redis.exists(keys.deadLetters('billing'))).toBe(0);
    expect(await isFull()).toBe(false);
  });

  it('prunes a stale group with its dead letters', async () => {
    const app = await start({});
    await fillDeadLetters('gone', 3000);
    await redis.set(keys.seen('gone'), String(Date.now() - 60_000));
    await makeFull();

    expect(await app.get(EventrailAdmin).pruneStaleGroups({ staleMs: 1000 })).toEqual(['gone']);

    expect(await redis.exists(keys.deadLetters('gone'))).toBe(0);
    expect(await redis.sismember(keys.groups, 'gone')).toBe(0);
    expect(await isFull()).toBe(false);
  });

  it('CLI: eventrail retention run and eventrail dlq purge work on a full Redis', async () => {
    assertBuilt();
    const app = await start({});
    await fillLog(app, 2000);
    await fillDeadLetters('billing', 1000);
    await makeFull();
    const env = cliEnv(prefix, { EVENTRAIL_REDIS_URL: server.url });

    const purge = await runCli(['dlq', 'purge', 'billing', '--yes', '--json'], env);
    expect(outcome(purge)).toEqual({ code: 0, stderr: '' });
    expect(parseJson(purge)).toEqual({ group: 'billing', purged: 1000 });
    await makeFull();
    const run = await runCli(['retention', 'run', '--max-len', '0', '--yes', '--json'], env);
    expect(outcome(run)).toEqual({ code: 0, stderr: '' });
    const result = parseJson<{ ran: boolean; partitions: Array<{ trimmed: number }> }>(run);
    expect(result.ran).toBe(true);
    expect(result.partitions.reduce((sum, p) => sum + p.trimmed, 0)).toBeGreaterThan(0);
    expect(await isFull()).toBe(false);
  });

  it('CLI: what needs memory exits 1 with the RedisFullError message', async () => {
    assertBuilt();
    await start({});
    await fillDeadLetters('billing', 3000);
    await makeFull();

    const replay = await runCli(['dlq', 'replay', 'billing', '--all'], cliEnv(prefix, { EVENTRAIL_REDIS_URL: server.url }));

    expect(replay.code).toBe(1);
    expect(replay.stderr).toMatch(/Redis is full \(used memory over maxmemory\) and refused to replay dead letters/);
    expect(await redis.xlen(keys.deadLetters('billing'))).toBe(3000);
  });

  it('refuses what needs memory with RedisFullError, naming the operation, and changes nothing', async () => {
    const app = await start({});
    await fillDeadLetters('billing', 3000);
    await makeFull();
    const admin = app.get(EventrailAdmin);

    const refusal = await admin.replayDeadLetters('billing', 'all').catch((error: unknown) => error);

    expect(refusal).toBeInstanceOf(RedisFullError);
    expect(refusal).toMatchObject({ operation: 'replay dead letters', reply: expect.stringMatching(OOM) });
    expect((refusal as Error).message).toMatch(/maxmemory/);
    expect(await redis.xlen(keys.deadLetters('billing'))).toBe(3000);
  });
});
