import { Injectable, INestApplicationContext, Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailMessage, EventrailModuleOptions, EventrailPublisher, EventrailRetention, OnEvent, RetentionOptions } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { registerScripts } from '../../lib/redis/scripts';
import { compareStreamIds } from '../../lib/wire/stream-id';
import { nextStreamId } from '../../lib/wire/stream-id';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const fastSeen: number[] = [];
const slowSeen: Array<{ n: number; partition: number }> = [];
let slowGateAt = Infinity;
let openSlowGate: () => void = () => undefined;
let slowGate = Promise.resolve();

@Injectable()
class Fast {
  @OnEvent('n', { group: 'fast', batchSize: 20 })
  handle(message: EventrailMessage<{ n: number }>): void {
    fastSeen.push(message.data.n);
  }
}

@Injectable()
class Slow {
  @OnEvent('n', { group: 'slow', batchSize: 10 })
  async handle(message: EventrailMessage<{ n: number }>): Promise<void> {
    if (slowSeen.length >= slowGateAt) await slowGate;
    slowSeen.push({ n: message.data.n, partition: message.partition });
  }
}

describe('retention: trims by maxLen / maxAgeMs, capped by live groups', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let apps: INestApplicationContext[] = [];
  const start = async (
    retention: Partial<RetentionOptions>,
    providers: unknown[] = [],
    extra: EventrailModuleOptions = {},
  ): Promise<INestApplicationContext> => {
    const app = await createApp({ prefix, partitions: 2, retention: { enabled: false, ...retention }, ...extra }, providers as never[]);
    apps.push(app);
    return app;
  };
  const ids = async (partition: number): Promise<string[]> => (await redis.xrange(keys.stream(partition), '-', '+')).map(([id]) => id);
  const serverNow = async (): Promise<number> => {
    const [seconds, micros] = await redis.time();
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  };
  /** A group as a stopped worker leaves it: registered, last seen `seenAgoMs` ago, with these committed offsets. */
  const registerGroup = async (group: string, seenAgoMs: number, offsets: Record<number, string>): Promise<void> => {
    await redis.sadd(keys.groups, group);
    await redis.set(keys.seen(group), String((await serverNow()) - seenAgoMs));
    for (const [partition, offset] of Object.entries(offsets)) await redis.set(keys.offset(group, Number(partition)), offset);
  };

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('ret');
    keys = new EventrailKeys(prefix, 2);
    fastSeen.length = 0;
    slowSeen.length = 0;
    slowGateAt = Infinity;
    slowGate = Promise.resolve();
  });
  afterEach(async () => {
    openSlowGate();
    jest.restoreAllMocks();
    await Promise.all(apps.map((a) => a.close()));
    apps = [];
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('never trims what a slow group has not committed while a fast one is done, under concurrent consuming', async () => {
    slowGateAt = 50;
    slowGate = new Promise((resolve) => (openSlowGate = resolve));
    // What the workers warn of is named in a failure (a commit that failed drops a partition).
    const warnings: string[] = [];
    const warn = jest.spyOn(Logger.prototype, 'warn');
    warn.mockImplementation((message: unknown) => void warnings.push(String((message as { msg?: string })?.msg ?? message)));
    const app = await start({ maxLen: 0 }, [Fast, Slow]);
    const publisher = app.get(EventrailPublisher);
    const retention = app.get(EventrailRetention);
    const publish = (from: number, count: number) =>
      publisher.publishMany(Array.from({ length: count }, (_, i) => ({ event: 'n', data: { n: from + i }, partition: (from + i) % 2 })));
    const first = await publish(0, 200);
    const lastOf = (p: number) => first.filter((r) => r.partition === p).at(-1)!.offset;

    // Fast is done everywhere; slow is stuck at its 51st event, with some batches committed.
    await waitFor(
      async () =>
        fastSeen.length === 200 &&
        slowSeen.length === 50 &&
        (await redis.get(keys.offset('fast', 0))) === lastOf(0) &&
        (await redis.get(keys.offset('fast', 1))) === lastOf(1) &&
        (await redis.get(keys.offset('slow', 0))) !== null &&
        (await redis.get(keys.offset('slow', 1))) !== null,
      () => `fast ${fastSeen.length}/200, slow ${slowSeen.length}/50`,
    );
    await waitFor(
      async () => (await redis.get(keys.offset('slow', 0))) !== '0-0' || (await redis.get(keys.offset('slow', 1))) !== '0-0',
      'slow commits',
    );

    const gated = await retention.runOnce();
    expect(gated.ran).toBe(true);
    let trimmedWhileBehind = 0;
    for (const p of [0, 1]) {
      const result = gated.partitions[p];
      const slowOffset = (await redis.get(keys.offset('slow', p)))!;
      // maxLen 0 asks for everything; slow (with entries it still needs in both partitions) holds it back.
      expect(result.requestedMinId).toBe(nextStreamId(lastOf(p)));
      expect(result.heldBackBy).toEqual(['slow']);
      const remaining = await ids(p);
      const needed = first.filter((r) => r.partition === p && compareStreamIds(r.offset, slowOffset) > 0).map((r) => r.offset);
      const inPartition = first.filter((r) => r.partition === p).map((r) => r.offset);
      expect(remaining).toEqual(inPartition.slice(inPartition.length - remaining.length)); // only the oldest went
      expect(remaining.slice(-needed.length)).toEqual(needed);
      trimmedWhileBehind += result.trimmed;
    }
    expect(trimmedWhileBehind).toBeGreaterThan(0);

    // Let slow go on, publish more and trim over and over while both groups consume.
    openSlowGate();
    const cycles: Promise<void> = (async () => {
      while (slowSeen.length < 300) {
        const result = await retention.runOnce();
        expect(result.ran).toBe(true);
      }
    })();
    const published = [...first];
    for (let from = 200; from < 300; from += 10) published.push(...(await publish(from, 10)));
    await waitFor(
      () => slowSeen.length === 300 && fastSeen.length === 300,
      () => `fast ${fastSeen.length}/300, slow ${slowSeen.length}/300`,
    );
    await cycles;

    // Slow handled every event exactly once, in publish order per partition: nothing it needed was trimmed.
    expect(slowSeen.map((s) => s.n).sort((a, b) => a - b)).toEqual(Array.from({ length: 300 }, (_, i) => i));
    for (const p of [0, 1]) {
      const order = slowSeen.filter((s) => s.partition === p).map((s) => s.n);
      expect(order).toEqual([...order].sort((a, b) => a - b));
    }
    expect([...fastSeen].sort((a, b) => a - b)).toEqual(Array.from({ length: 300 }, (_, i) => i));

    // Once both have committed everything, a cycle empties the log. The last ids come from the publishes:
    // the cycles above may have emptied a partition already (both groups done with it while slow still
    // handled the other), so the stream cannot tell them.
    const lastIds = [0, 1].map((p) => published.filter((r) => r.partition === p).at(-1)!.offset);
    const committed = async (): Promise<string[]> =>
      Promise.all([0, 1].flatMap((p) => ['fast', 'slow'].map(async (group) => `${group}/${p} ${await redis.get(keys.offset(group, p))}`)));
    const expected = [0, 1].flatMap((p) => ['fast', 'slow'].map((group) => `${group}/${p} ${lastIds[p]}`));
    let found: string[] = [];
    await waitFor(
      async () => (found = await committed()).every((line, i) => line === expected[i]),
      () => `final commits ${expected.join(', ')}; committed ${found.join(', ')}; warnings: ${warnings.join(' | ') || 'none'}`,
    );
    await retention.runOnce();
    expect([await redis.xlen(keys.stream(0)), await redis.xlen(keys.stream(1))]).toEqual([0, 0]);
  });

  it('keeps the newest maxLen entries, drops entries older than maxAgeMs, and takes the stricter of both', async () => {
    // Entries from a producer in another language, with explicit ids two minutes back, then fresh ones.
    const old = (await serverNow()) - 120_000;
    for (let i = 0; i < 20; i++) await redis.xadd(keys.stream(1), `${old}-${i}`, 'event', 'n', 'data', '{}');
    const byLength = await start({ maxLen: 10 });
    const publisher = byLength.get(EventrailPublisher);
    const p0 = (await publisher.publishMany(Array.from({ length: 25 }, (_, n) => ({ event: 'n', data: { n }, partition: 0 })))).map(
      (r) => r.offset,
    );
    const p1 = (await publisher.publishMany(Array.from({ length: 5 }, (_, n) => ({ event: 'n', data: { n }, partition: 1 })))).map(
      (r) => r.offset,
    );

    const first = await byLength.get(EventrailRetention).runOnce();
    expect(first.partitions.map((p) => [p.requestedMinId, p.minId, p.trimmed, p.heldBackBy])).toEqual([
      [p0[15], p0[15], 15, []],
      [`${old}-15`, `${old}-15`, 15, []],
    ]);
    expect(await ids(0)).toEqual(p0.slice(15));
    expect(await ids(1)).toEqual([...[15, 16, 17, 18, 19].map((i) => `${old}-${i}`), ...p1]);

    // maxLen 8 is the stricter limit in partition 0 (all recent), maxAgeMs in partition 1 (5 old entries).
    const both = await (await start({ maxLen: 8, maxAgeMs: 60_000 })).get(EventrailRetention).runOnce();
    expect(both.partitions[0]).toMatchObject({ requestedMinId: p0[17], trimmed: 2 });
    expect(both.partitions[1].trimmed).toBe(5);
    expect(both.partitions[1].requestedMinId).toMatch(/^\d+-0$/);
    expect(Number(both.partitions[1].requestedMinId!.split('-')[0])).toBeGreaterThan(old);
    expect(await ids(0)).toEqual(p0.slice(17));
    expect(await ids(1)).toEqual(p1);
  });

  it('caps even an approximate trim at a live group committed offset', async () => {
    const app = await start({ maxLen: 0, approximate: true });
    const published = await app.get(EventrailPublisher).publishMany(Array.from({ length: 1000 }, (_, n) => ({ event: 'n', data: { n } })));
    await registerGroup('reader', 0, { 0: published[499].offset, 1: '0-0' });
    const result = await app.get(EventrailRetention).runOnce();
    expect(result.partitions[0].minId).toBe(nextStreamId(published[499].offset));
    expect(result.partitions[0].heldBackBy).toEqual(['reader']);
    // Whole nodes of 100 entries go; nothing after the offset does.
    expect(result.partitions[0].trimmed).toBeGreaterThan(0);
    expect(result.partitions[0].trimmed).toBeLessThanOrEqual(500);
    expect((await ids(0)).slice(-500)).toEqual(published.slice(500).map((r) => r.offset));
  });

  it('lets stale groups stop holding the log back, with a warning naming them; a group with a live member always holds', async () => {
    const setup = await start({ maxLen: 0 }, [], { autoStart: false });
    const published = await setup.get(EventrailPublisher).publishMany(Array.from({ length: 10 }, (_, n) => ({ event: 'n', data: { n } })));
    const o = published.map((r) => r.offset);
    await registerGroup('gone', 60_000, { 0: '0-0' }); // nothing committed, last seen a minute ago
    await registerGroup('resting', 0, { 0: o[4] }); // stopped just now
    await registerGroup('busy', 10 * 3_600_000, { 0: o[7] }); // last heartbeat long ago, but a member is live
    await redis.zadd(keys.members('busy'), (await serverNow()) + 60_000, 'worker-1');

    const patient = await (await start({ maxLen: 0, staleGroupMs: 3_600_000 })).get(EventrailRetention).runOnce();
    expect(patient.staleGroups).toEqual([]);
    expect(patient.partitions[0]).toMatchObject({ minId: null, heldBackBy: ['busy', 'gone', 'resting'], trimmed: 0 });
    expect(await redis.xlen(keys.stream(0))).toBe(10);

    const warn = jest.spyOn(Logger.prototype, 'warn');
    const strict = (await start({ maxLen: 0, staleGroupMs: 30_000 })).get(EventrailRetention);
    const result = await strict.runOnce();
    expect(result.staleGroups).toEqual(['gone']);
    expect(result.partitions[0]).toMatchObject({ minId: nextStreamId(o[4]), heldBackBy: ['busy', 'resting'], trimmed: 5 });
    expect(await ids(0)).toEqual(o.slice(5));
    const warnings = () => warn.mock.calls.map(([message]) => String(message)).filter((m) => m.includes('"gone"'));
    expect(warnings()).toHaveLength(1);
    expect(warnings()[0]).toContain('no longer holds the log back');
    await strict.runOnce();
    expect(warnings()).toHaveLength(1); // said once, not every cycle
  });

  it('trims dead-letter streams to deadLetterMaxLen', async () => {
    await registerGroup('billing', 0, {});
    for (let i = 0; i < 5; i++) await redis.xadd(keys.deadLetters('billing'), '*', 'event', 'n', 'reason', 'non-retryable');
    const result = await (await start({ deadLetterMaxLen: 2 })).get(EventrailRetention).runOnce();
    expect(result.deadLetters).toEqual([{ group: 'billing', trimmed: 3 }]);
    expect(await redis.xlen(keys.deadLetters('billing'))).toBe(2);
  });

  it('does nothing while another instance holds the retention lock, and never deletes its lock', async () => {
    const app = await start({ maxLen: 0 });
    await app.get(EventrailPublisher).publishMany(Array.from({ length: 3 }, (_, n) => ({ event: 'n', data: { n } })));
    await redis.set(keys.retentionLock(), 'another-instance', 'PX', 60_000);
    const result = await app.get(EventrailRetention).runOnce();
    expect(result).toEqual({ ran: false, staleGroups: [], partitions: [], deadLetters: [] });
    expect(await redis.xlen(keys.stream(0))).toBe(3);
    expect(await redis.get(keys.retentionLock())).toBe('another-instance');

    await redis.del(keys.retentionLock());
    expect((await app.get(EventrailRetention).runOnce()).partitions[0].trimmed).toBe(3);
    expect(await redis.exists(keys.retentionLock())).toBe(0); // released after the cycle
  });

  it('trim script: refuses (and removes nothing) when an entry below MINID is not archived', async () => {
    const client = registerScripts(redis);
    for (let i = 1; i <= 5; i++) await redis.xadd(keys.stream(0), `${i}-0`, 'event', 'n', 'data', '{}');
    const trim = (minId: string) =>
      client.eventrailTrimLog(keys.stream(0), keys.archived(0), keys.bigEntries(0), minId, '=', 'fs:/archive');
    expect(await trim('4-0')).toBe(-1); // no mark at all
    await redis.hset(keys.archived(0), 'fs:/archive', '2-0');
    expect(await trim('4-0')).toBe(-1); // 3-0 is not archived
    expect(await redis.xlen(keys.stream(0))).toBe(5);
    expect(await trim('3-0')).toBe(2);
    await redis.hset(keys.archived(0), 'fs:/archive', '5-0');
    expect(await trim('5-0')).toBe(2);
    expect(await client.eventrailTrimLog(keys.stream(0), keys.archived(0), keys.bigEntries(0), '9-0', '=', '')).toBe(1); // no archive: plain trim
  });
});
