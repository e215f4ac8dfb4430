import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, LAG_COUNT_CAP, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { countEntriesAfter } from '../../lib/consumer/coordination/lag';
import { STREAM_START } from '../../lib/wire/stream-id';
import { EventrailClient, registerScripts } from '../../lib/redis/scripts';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { monitorOf } from '../support/monitor';

/** Entries far past the counting cap on both sides of the offsets used below. */
const DEEP = 50_000;
const handled = new Map<string, number>();

@Injectable()
class Ledger {
  @OnEvent('e', { group: 'ledger', batchSize: 7, concurrency: 3 })
  handle(message: EventrailMessage<{ n: number }>): void {
    handled.set('ledger', (handled.get('ledger') ?? 0) + 1);
    void message;
  }

  @OnEvent('e', 'mailer')
  mail(): void {
    handled.set('mailer', (handled.get('mailer') ?? 0) + 1);
  }
}

/**
 * Lag from the offset's stored position (readLag-3.lua) against real Redis:
 * exact far past the old counting cap, through resets, trims, deletes and
 * groups whose position is unknown, at a number of commands that does not
 * depend on the depth.
 */
describe('lag from the committed position', () => {
  let redis: Redis;
  let client: EventrailClient;
  const prefix = uniquePrefix('lagpos');
  const keys = new EventrailKeys(prefix, 1);
  let admin: INestApplicationContext;
  /** Every entry id of partition 0, in order. */
  let ids: string[] = [];

  /** What the script says (-1: it cannot tell) and what counting every entry says. */
  const both = async (group: string): Promise<{ fast: number; counted: number }> => {
    const [fast, committed] = await client.eventrailReadLag(keys.stream(0), keys.offset(group, 0), keys.recovery(group, 0));
    const { lag: counted } = await countEntriesAfter(client, keys.stream(0), committed ?? STREAM_START, Number.MAX_SAFE_INTEGER);
    return { fast, counted };
  };
  const expectExact = async (group: string, lag?: number): Promise<void> => {
    const { fast, counted } = await both(group);
    expect(fast).toBe(counted);
    if (lag !== undefined) expect(fast).toBe(lag);
  };
  /** Appends `n` entries with pipelined XADDs, as publishMany does. */
  const append = async (n: number): Promise<void> => {
    const publisher = admin.get(EventrailPublisher);
    for (let done = 0; done < n; done += 10_000) {
      const batch = Array.from({ length: Math.min(10_000, n - done) }, (_, i) => ({ event: 'e', data: { n: done + i } }));
      ids.push(...(await publisher.publishMany(batch)).map((p) => p.offset));
    }
  };
  /** Runs the groups' consumers until each committed the last entry, then stops them (a clean release). */
  const consumeAll = async (groups: string[]): Promise<void> => {
    const app = await createApp({ prefix, partitions: 1 }, [Ledger]);
    try {
      const last = ids[ids.length - 1];
      await waitFor(async () => (await redis.mget(...groups.map((g) => keys.offset(g, 0)))).every((o) => o === last), 'caught up', 60_000);
    } finally {
      await app.close();
    }
  };

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    client = registerScripts(new Redis(testRedisUrl()));
    admin = await createApp({ prefix, partitions: 1 });
  });
  afterAll(async () => {
    await admin.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
    client.disconnect();
  });

  it('keeps lag exact far past the counting cap, through commits in batches and low watermarks', async () => {
    await append(500);
    await consumeAll(['ledger', 'mailer']);
    await expectExact('ledger', 0);

    await append(DEEP);
    await expectExact('ledger', DEEP);
    const status = await admin.get(EventrailAdmin).group('ledger');
    expect(status.partitions[0]).toMatchObject({ lag: DEEP, lagCapped: false });

    // A consumer that stops in the middle (batches of 7, 3 at a time): the position follows every commit.
    const app = await createApp({ prefix, partitions: 1 }, [Ledger]);
    const before = handled.get('ledger') ?? 0;
    await waitFor(() => (handled.get('ledger') ?? 0) - before > 2_000, 'ledger handled part of the backlog', 60_000);
    await app.close();
    const { fast, counted } = await both('ledger');
    expect(counted).toBeGreaterThan(0);
    expect(counted).toBeLessThan(DEEP);
    expect(fast).toBe(counted);
  });

  it('costs the same commands for a group caught up and one 50 000 entries behind', async () => {
    await consumeAll(['mailer']);
    // Mid-log, with 500 entries before the offset and 50 000 after it: both past the counting cap.
    await admin.get(EventrailAdmin).resetOffsets('ledger', { id: ids[500] });
    await expectExact('ledger', DEEP);

    /** Every command that names a key of this prefix while one status read runs, as MONITOR shows them (`lua ` for a script's own). */
    const commandsOf = async (group: string): Promise<string[]> => {
      const monitor = await monitorOf(redis); // a connection of its own
      const marker = `${prefix}:marker:${group}`;
      const seen: string[] = [];
      let ended = false;
      monitor.on('monitor', (_time: string, args: string[], source: string) => {
        if (args.includes(marker)) ended = true;
        else if (!ended && args.some((a) => a.includes(prefix))) seen.push(`${source === 'lua' ? 'lua ' : ''}${args[0].toLowerCase()}`);
      });
      const status = await admin.get(EventrailAdmin).group(group);
      await redis.echo(marker);
      await waitFor(() => ended, 'the marker through MONITOR');
      monitor.disconnect();
      expect(status.partitions[0].lagCapped).toBe(false);
      return seen.sort();
    };
    const behind = await commandsOf('ledger');
    const caughtUp = await commandsOf('mailer');
    expect((await admin.get(EventrailAdmin).group('ledger')).lag).toBe(DEEP);
    expect((await admin.get(EventrailAdmin).group('mailer')).lag).toBe(0);
    // The same commands sent; inside the lag script, one HGET of the position more when there is lag.
    const sent = (commands: string[]): string[] => commands.filter((c) => !c.startsWith('lua '));
    expect(sent(behind)).toEqual(sent(caughtUp));
    expect(behind.filter((c) => !caughtUp.includes(c))).toEqual(['lua hget']);
    expect(behind.length).toBe(caughtUp.length + 1);
    console.log(`one group status read of 1 partition, ${DEEP} behind: ${behind.join(', ')}; caught up: ${caughtUp.join(', ')}`);
  });

  it('stays exact after resets to the start, an id, a time and the end', async () => {
    const reset = admin.get(EventrailAdmin).resetOffsets.bind(admin.get(EventrailAdmin));
    await reset('ledger', 'start', { force: true });
    await expectExact('ledger', ids.length);
    await reset('ledger', { id: ids[30_000] }, { force: true }); // counted once by the reset
    await expectExact('ledger', ids.length - 30_000);
    const [ms] = ids[40_000].split('-');
    await reset('ledger', { time: new Date(Number(ms)) }, { force: true });
    const { fast, counted } = await both('ledger');
    expect(fast).toBe(counted);
    expect(fast).toBeGreaterThan(ids.length - 40_001);
    await reset('ledger', 'end', { force: true });
    await expectExact('ledger', 0);
    await append(3);
    await expectExact('ledger', 3);
  });

  it('stays exact when the log is trimmed below the offset, and past it', async () => {
    await admin.get(EventrailAdmin).resetOffsets('ledger', { id: ids[20_001] }, { force: true });
    await expectExact('ledger', ids.length - 20_001);
    await redis.xtrim(keys.stream(0), 'MINID', ids[10_000]); // below the offset: the position holds
    await expectExact('ledger', ids.length - 20_001);
    await redis.xtrim(keys.stream(0), 'MINID', ids[25_000]); // past it: the lag is what is left
    await expectExact('ledger', ids.length - 25_000);
    ids = ids.slice(25_000);
  });

  it('counts instead when an entry after the offset was deleted, and takes the position back once caught up', async () => {
    await admin.get(EventrailAdmin).resetOffsets('ledger', { id: ids[100] }, { force: true });
    await expectExact('ledger', ids.length - 100);
    await redis.xdel(keys.stream(0), ids[5]); // before the offset: nothing changes
    await expectExact('ledger', ids.length - 100);
    await redis.xdel(keys.stream(0), ids[200]); // after it: the position would be one too many
    ids.splice(200, 1);
    expect(await both('ledger')).toEqual({ fast: -1, counted: ids.length - 100 });
    const status = await admin.get(EventrailAdmin).group('ledger');
    expect(status.partitions[0]).toMatchObject({ lag: ids.length - 100, lagCapped: false }); // counted: few entries before the offset

    await consumeAll(['ledger']);
    await expectExact('ledger', 0);
    await append(5);
    await expectExact('ledger', 5);
  });

  it('falls back to counting for an offset an older eventrail wrote without a position', async () => {
    await consumeAll(['ledger']);
    // An older version's commit: the offset moves, the position stays with the old offset.
    await redis.set(keys.offset('ledger', 0), ids[ids.length - 20]);
    expect(await both('ledger')).toEqual({ fast: -1, counted: 19 });
    expect((await admin.get(EventrailAdmin).group('ledger')).partitions[0]).toMatchObject({ lag: 19, lagCapped: false });

    // Mid-log and deep on both sides: capped, as before positions existed.
    await redis.set(keys.offset('ledger', 0), ids[Math.floor(ids.length / 2)]);
    expect((await admin.get(EventrailAdmin).group('ledger')).partitions[0]).toMatchObject({ lag: LAG_COUNT_CAP, lagCapped: true });

    // The next worker that reaches the end writes the position again.
    await consumeAll(['ledger']);
    await append(7);
    await expectExact('ledger', 7);
  });
});

/**
 * The commit script's two ways of keeping the position (commitOffset-5.lua):
 * adding the worker's count to the stored one (no XINFO), and checking it
 * against XINFO STREAM when asked. A count that went wrong between checks
 * (an entry deleted before the worker read it) is never shown as lag.
 */
describe('lag positions through the commit script', () => {
  const prefix = uniquePrefix('lagscript');
  const keys = new EventrailKeys(prefix, 1);
  let redis: Redis;
  let client: EventrailClient;
  let ids: string[];
  let token: string;
  let since = STREAM_START;

  const lag = async (): Promise<number> => (await client.eventrailReadLag(keys.stream(0), keys.offset('g', 0), keys.recovery('g', 0)))[0];
  /** Commits `to` as a worker would that read `count` entries from `from` after its last commit. */
  const commit = async (to: string, from: string, count: number, verify: '0' | '1'): Promise<void> => {
    const k = [keys.lease('g', 0), keys.offset('g', 0), keys.done('g', 0), keys.recovery('g', 0), keys.stream(0)] as const;
    expect(await client.eventrailCommitOffset(...k, token, to, 60_000, 0, since, from, count, verify, 0)).toBe(1);
    since = to;
  };

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    client = registerScripts(redis);
    const pipeline = redis.pipeline();
    for (let n = 0; n < 10; n++) pipeline.xadd(keys.stream(0), '*', 'event', 'e', 'data', '{}');
    ids = ((await pipeline.exec()) ?? []).map(([, id]) => id as string);
    const acquired = await client.eventrailAcquireLease(
      keys.lease('g', 0),
      keys.epoch('g', 0),
      keys.offset('g', 0),
      keys.stream(0),
      keys.recovery('g', 0),
      'w',
      60_000,
      'start',
      '',
    );
    token = acquired![0];
  });
  afterAll(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('adds counts between checks, and trusts them only while nothing from the anchor on was removed', async () => {
    expect(await lag()).toBe(10); // before the first entry: the length
    await commit(ids[2], ids[0], 3, '0'); // counted on from the acquire's position, anchored at the first entry
    expect(await lag()).toBe(7);
    await commit(ids[4], ids[3], 2, '1'); // checked: anchored here now
    expect(await lag()).toBe(5);

    await redis.xdel(keys.stream(0), ids[6]); // before the worker reads it: its count comes out one short
    await commit(ids[7], ids[5], 2, '0');
    expect(await lag()).toBe(-1); // not trusted (deleted after the anchor): readers count
    await commit(ids[8], ids[8], 1, '1'); // the check finds the deletion and forgets the position
    expect(await redis.hget(keys.recovery('g', 0), 'position')).toBeNull();
    await commit(ids[9], ids[9], 1, '0'); // nothing stored: checked anyway, and the end of the log tells it
    expect(await lag()).toBe(0);
    await redis.xadd(keys.stream(0), '*', 'event', 'e', 'data', '{}');
    expect(await lag()).toBe(1);
  });

  it('counts instead while a trim reached past the anchor but not the offset', async () => {
    const more: string[] = [];
    for (let n = 0; n < 4; n++) more.push((await redis.xadd(keys.stream(0), '*', 'event', 'e', 'data', '{}')) as string);
    const first = (await redis.xrange(keys.stream(0), `(${since}`, '+', 'COUNT', 1))[0][0];
    await commit(more[1], first, 3, '0'); // anchored at ids[9], from the last check
    expect(await lag()).toBe(2);
    await redis.xtrim(keys.stream(0), 'MINID', more[0]); // past the anchor, before the offset
    expect(await lag()).toBe(-1);
    const status = await countEntriesAfter(client, keys.stream(0), more[1]);
    expect(status).toEqual({ lag: 2, capped: false }); // what readers count then: exact, and short
  });
});

/**
 * Retention trims only what every live group committed, so a group's position
 * survives a trim that reaches past its anchor: the cycle moves the anchor up
 * (reanchorPosition-2.lua) and the lag stays O(1) and exact.
 */
describe('lag positions through retention', () => {
  const prefix = uniquePrefix('lagret');
  const keys = new EventrailKeys(prefix, 1);
  let redis: Redis;
  let client: EventrailClient;
  let app: INestApplicationContext;

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    client = registerScripts(new Redis(testRedisUrl()));
  });
  afterAll(async () => {
    await app?.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
    client.disconnect();
  });

  it('keeps a position whose anchor a retention trim passed, below the offset', async () => {
    // Both groups register and catch up on a few entries, then leave: live for retention (seen a moment ago).
    const consumers = await createApp({ prefix, partitions: 1 }, [Ledger]);
    const first = await consumers.get(EventrailPublisher).publishMany([1, 2, 3].map((n) => ({ event: 'e', data: { n } })));
    await waitFor(async () => (await redis.get(keys.offset('ledger', 0))) === first[2].offset, 'ledger caught up');
    await waitFor(async () => (await redis.get(keys.offset('mailer', 0))) === first[2].offset, 'mailer caught up');
    await consumers.close();

    app = await createApp({ prefix, partitions: 1, retention: { enabled: false, maxLen: 2_000, approximate: false } });
    const ids = (await app.get(EventrailPublisher).publishMany(Array.from({ length: 5_000 }, (_, n) => ({ event: 'e', data: { n } })))).map(
      (p) => p.offset,
    );
    const admin = app.get(EventrailAdmin);
    await admin.resetOffsets('mailer', 'end');
    await admin.resetOffsets('ledger', { id: ids[4_000] }); // 1 000 behind, past what maxLen keeps
    // As a worker's chain leaves it: the position counted on since a check one second earlier, at ids[100].
    const [offset, position] = (await redis.hget(keys.recovery('ledger', 0), 'position'))!.split('@');
    await redis.hset(keys.recovery('ledger', 0), 'position', `${offset}@${position}@${ids[100]}`);
    const lag = async (): Promise<number> =>
      (await client.eventrailReadLag(keys.stream(0), keys.offset('ledger', 0), keys.recovery('ledger', 0)))[0];
    expect(await lag()).toBe(1_000);

    const result = await admin.runRetention();
    expect(result.partitions[0].trimmed).toBe(3_003); // keeps the newest 2 000 (the ledger, 1 000 behind, holds nothing back)
    expect(await redis.xlen(keys.stream(0))).toBe(2_000);
    expect(await lag()).toBe(1_000); // still from the position, not counted
    expect((await admin.group('ledger')).partitions[0]).toMatchObject({ lag: 1_000, lagCapped: false });
  });
});
