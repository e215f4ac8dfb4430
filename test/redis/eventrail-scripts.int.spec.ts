import Redis from 'ioredis';
import { EventrailScripts } from '../../lib/redis/eventrail-scripts';
import { EventrailKeys } from '../../lib/redis/keys';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

/**
 * The facade builds every script's KEYS and ARGV from named arguments. Each
 * call here is checked by what it did to the keys the schema names, so an
 * argument out of place (a key for another, ARGV shifted by one) fails.
 * Twice: through the lean commands and through ioredis's own (the fallback
 * where ioredis lacks what the lean commands use), which must answer alike.
 */
describe.each([
  ['lean commands', true],
  ['ioredis’s own commands', false],
])('EventrailScripts through %s', (_, lean) => {
  const prefix = uniquePrefix(lean ? 'facade-lean' : 'facade-own');
  const keys = new EventrailKeys(prefix, 2);
  let redis: Redis;
  let scripts: EventrailScripts;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
    scripts = new EventrailScripts(redis, keys, { lean });
  });
  afterAll(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('acquires, renews, commits with done-marks and progress, fences a stale token, and releases a lease', async () => {
    const base = { group: 'g', partition: 1, ttlMs: 60_000 };
    await redis.xadd(keys.stream(1), '1-1', 'type', 'a');
    await redis.xadd(keys.stream(1), '2-1', 'type', 'b');
    const first = await scripts.acquireLease({ ...base, workerId: 'w1', initialMode: 'start', initialId: '', generation: '0' });
    expect(first).toEqual({ token: expect.stringMatching(/^w1:\d+$/), committed: '0-0', previousHolder: 'released' });
    const token = first?.token as string;
    expect(await redis.get(keys.lease('g', 1))).toBe(token);
    expect(await scripts.acquireLease({ ...base, workerId: 'w2', initialMode: 'end', initialId: '', generation: '0' })).toBeNull();

    expect(await scripts.renewLease({ ...base, token })).toBe(true);
    expect(await scripts.renewLease({ ...base, token: 'w9:1' })).toBe(false);

    const progress = { since: '0-0', from: '1-1', count: 2, verify: true };
    const commit = { ...base, token, offset: '2-1', markTtlMs: 30_000, doneIds: ['e1', 'e2'], progress };
    expect(await scripts.commitOffset(commit)).toBe(true);
    expect(await redis.get(keys.offset('g', 1))).toBe('2-1');
    expect(await redis.pttl(keys.lease('g', 1))).toBeGreaterThan(50_000);
    expect((await redis.zrange(keys.done('g', 1), '0', '-1')).sort()).toEqual(['e1', 'e2']);
    expect(await scripts.readLag({ group: 'g', partition: 1 })).toEqual({ lag: 0, committed: '2-1' });
    await redis.xadd(keys.stream(1), '3-1', 'type', 'c');
    expect(await scripts.readLag({ group: 'g', partition: 1 })).toEqual({ lag: 1, committed: '2-1' });
    // Without marks asked for, the ids are not written.
    expect(await scripts.commitOffset({ ...commit, offset: '3-1', markTtlMs: 0, doneIds: ['e3'], progress: undefined })).toBe(true);
    expect(await redis.zscore(keys.done('g', 1), 'e3')).toBeNull();
    expect(await scripts.commitOffset({ ...commit, token: 'w9:1', offset: '9-9' })).toBe(false);
    expect(await redis.get(keys.offset('g', 1))).toBe('3-1');

    expect(await scripts.markDelivery({ group: 'g', partition: 1, offset: '3-1' })).toBe(1);
    expect(await scripts.markDelivery({ group: 'g', partition: 1, offset: '3-1' })).toBe(2);
    expect(await scripts.markFailure({ group: 'g', partition: 1, offset: '3-1', nowMs: 1_000 })).toBe(1_000);
    expect(await scripts.markFailure({ group: 'g', partition: 1, offset: '3-1', nowMs: 5_000 })).toBe(1_000);

    await scripts.releaseLease({ ...base, token, epoch: token.slice(token.lastIndexOf(':') + 1) });
    expect(await redis.exists(keys.lease('g', 1))).toBe(0);
    const next = await scripts.acquireLease({ ...base, workerId: 'w2', initialMode: 'start', initialId: '', generation: '0' });
    expect(next).toMatchObject({ committed: '3-1', previousHolder: 'released' });
    await redis.del(keys.lease('g', 1)); // gone without a release: the next holder recovers
    const recovering = await scripts.acquireLease({ ...base, workerId: 'w3', initialMode: 'start', initialId: '', generation: '0' });
    expect(recovering?.previousHolder).toBe('unreleased');
  });

  it("bars workers from a partition: takes a barred holder's lease back as released, refuses its acquire until lifted or run out", async () => {
    const base = { group: 'b', partition: 0, ttlMs: 60_000, initialMode: 'start' as const, initialId: '', generation: '0' };
    const held = await scripts.acquireLease({ ...base, workerId: 'host:1:a' });
    const token = held?.token as string;
    // Barring someone else leaves the lease alone.
    expect(await scripts.barMembers({ group: 'b', partition: 0, workerIds: ['host:2:b'], ttlMs: 60_000 })).toBe(false);
    expect(await redis.get(keys.lease('b', 0))).toBe(token);
    expect(await scripts.barMembers({ group: 'b', partition: 0, workerIds: ['host:2:b', 'host:1:a'], ttlMs: 60_000 })).toBe(true);
    // Revoked, not deleted (revoke-lease.lua): fenced at once, and nobody takes it until the holder clears it.
    expect(await redis.get(keys.lease('b', 0))).toBe(`revoked:${token}`);
    expect(await scripts.commitOffset({ ...base, token, offset: '1-1', markTtlMs: 0, doneIds: [] })).toBe(false);
    expect(await scripts.renewLease({ ...base, token })).toBe(false);
    expect(await scripts.acquireLease({ ...base, workerId: 'host:1:a' })).toBeNull();
    expect(await scripts.acquireLease({ ...base, workerId: 'host:3:c' })).toBeNull();
    expect(await scripts.releaseLease({ ...base, token, epoch: token.slice(token.lastIndexOf(':') + 1) })).toBe('cleared');
    // Another worker takes it as released (no crash counted), then hands it back.
    const other = await scripts.acquireLease({ ...base, workerId: 'host:3:c' });
    expect(other?.previousHolder).toBe('released');
    const otherToken = other?.token as string;
    await scripts.releaseLease({ ...base, token: otherToken, epoch: otherToken.slice(otherToken.lastIndexOf(':') + 1) });
    // Lifted: the worker may take it again; the other bar stays.
    await scripts.barMembers({ group: 'b', partition: 0, workerIds: ['host:1:a'], ttlMs: 0 });
    expect(await scripts.acquireLease({ ...base, workerId: 'host:1:a' })).toMatchObject({ previousHolder: 'released' });
    expect(await redis.hexists(keys.recovery('b', 0), 'barred:host:2:b')).toBe(1);
    // A bar that ran out no longer refuses, and the next bar forgets it.
    await redis.hset(keys.recovery('b', 0), 'barred:host:2:b', '1');
    await redis.del(keys.lease('b', 0));
    expect(await scripts.acquireLease({ ...base, workerId: 'host:2:b' })).not.toBeNull();
    await scripts.barMembers({ group: 'b', partition: 0, workerIds: ['host:4:d'], ttlMs: 60_000 });
    expect((await redis.hkeys(keys.recovery('b', 0))).filter((f) => f.startsWith('barred:'))).toEqual(['barred:host:4:d']);
    // With the able members given, a lease held by anyone else is taken back too, without a bar.
    expect(await scripts.barMembers({ group: 'b', partition: 0, workerIds: ['host:4:d'], ttlMs: 60_000, able: ['host:2:b'] })).toBe(false);
    expect(await redis.exists(keys.lease('b', 0))).toBe(1);
    expect(await scripts.barMembers({ group: 'b', partition: 0, workerIds: ['host:4:d'], ttlMs: 60_000, able: ['host:5:e'] })).toBe(true);
    expect(await redis.get(keys.lease('b', 0))).toMatch(/^revoked:host:2:b:\d+$/);
    // A lease revoked already is left as it is (not taken back again).
    expect(await scripts.barMembers({ group: 'b', partition: 0, workerIds: ['host:4:d'], ttlMs: 60_000, able: ['host:5:e'] })).toBe(false);
    expect(await redis.hexists(keys.recovery('b', 0), 'barred:host:2:b')).toBe(0);
  });

  it('resets an offset with a counted lag position', async () => {
    const to = await redis.xadd(keys.stream(0), '*', 'type', 'x');
    const last = await redis.xadd(keys.stream(0), '*', 'type', 'y');
    const info = (await redis.xinfo('STREAM', keys.stream(0))) as unknown[];
    const entriesAdded = Number(info[info.indexOf('entries-added') + 1]);
    await redis.set(keys.offset('r', 0), '0-0');
    expect(
      await scripts.resetOffset({ group: 'r', partition: 0, to: to as string, counted: { upTo: last as string, count: 1, entriesAdded } }),
    ).toBe('0-0');
    expect(await redis.get(keys.offset('r', 0))).toBe(to);
    expect(await scripts.readLag({ group: 'r', partition: 0 })).toEqual({ lag: 1, committed: to });
  });

  it('beats a heartbeat, and drops an idle group with its partitions', async () => {
    const beat = await scripts.heartbeat({ group: 'd', workerId: 'w1', ttlMs: 60_000, infoJson: '{"host":"h"}' });
    expect(beat.members).toEqual(['w1']);
    expect(await redis.hget(keys.memberInfo('d'), 'w1')).toBe('{"host":"h"}');
    expect(await scripts.dropGroup({ group: 'd', mode: 'idle', staleMs: 0 })).toEqual({ verdict: 'live', members: ['w1'] });
    await redis.zrem(keys.members('d'), 'w1');
    await redis.set(keys.offset('d', 0), '5-0');
    const dropped = await scripts.dropGroup({ group: 'd', mode: 'force', staleMs: 0 });
    expect(dropped).toEqual({ verdict: 'dropped', generation: expect.any(String) });
    const generation = (dropped as { generation: string }).generation;
    expect(generation).not.toBe(beat.generation);
    await scripts.dropGroupPartition({ group: 'd', partition: 0, generation });
    expect(await redis.exists(keys.offset('d', 0))).toBe(0);
  });

  it('appends one, a run, and a dedup run to the partition’s stream, in order', async () => {
    const one = await scripts.append(1, ['type', 'one']);
    const [offsets, failure] = await scripts.appendMany({ partition: 1, events: [2, 'type', 'two', 4, 'type', 'three', 'data', '{}'] });
    expect(failure).toBeUndefined();
    await scripts.checkAppendMany();
    const entries = await redis.xrange(keys.stream(1), one, '+');
    expect(entries.map(([, f]) => f)).toEqual([
      ['type', 'one'],
      ['type', 'two'],
      ['type', 'three', 'data', '{}'],
    ]);
    expect(entries.slice(1).map(([id]) => id)).toEqual(offsets);

    const [dedupOffset, duplicate] = await scripts.publishDedup({ partition: 1, id: 'id-1', windowMs: 60_000, fields: ['type', 'four'] });
    expect(duplicate).toBe(0);
    expect(await redis.exists(keys.dedup(1, 'id-1'))).toBe(1);
    const run = await scripts.appendManyDedup({
      partition: 1,
      ids: ['id-1', 'id-2'],
      windowMs: 60_000,
      events: [2, 'type', 'four', 2, 'type', 'five'],
    });
    expect(run.slice(0, 2)).toEqual([
      [dedupOffset, expect.stringMatching(/^\d+-\d+$/)],
      [1, 0],
    ]);
    expect(await redis.pttl(keys.dedup(1, 'id-2'))).toBeGreaterThan(50_000);
    const pipeline = redis.pipeline();
    scripts.queuePublishDedup(pipeline, { partition: 1, id: 'id-2', windowMs: 60_000, fields: ['type', 'five'] });
    expect(await pipeline.exec()).toEqual([[null, [run[0][1], 1]]]);
  });

  it('trims below a MINID only past the archive marks, and reanchors a lag position', async () => {
    const stream = keys.stream(0);
    await redis.del(stream);
    for (let i = 1; i <= 4; i++) await redis.xadd(stream, `${i}-1`, 'n', String(i));
    const trim = { partition: 0, minId: '3-1', approximate: false, allowUnarchived: false };
    await redis.hset(keys.archived(0), 'fs:/a', '1-1');
    expect(await scripts.trimLog({ ...trim, sinkId: 'fs:/a' })).toBe(-1);
    expect(await scripts.trimLog({ ...trim, sinkId: '' })).toBe(-2);
    await redis.hset(keys.archived(0), 'fs:/a', '2-1');
    expect(await scripts.trimLog({ ...trim, sinkId: 'fs:/a' })).toBe(2);
    expect(await redis.xlen(stream)).toBe(2);
    expect(await scripts.reanchorPosition({ group: 'nobody', partition: 0, firstBeforeTrim: '1-1' })).toEqual(expect.any(Number));
  });

  it('holds and releases the retention lock and a replay claim by token', async () => {
    await redis.set(keys.retentionLock(), 't1', 'PX', 1_000);
    expect(await scripts.extendRetentionLock({ token: 't1', ttlMs: 60_000 })).toBe(true);
    expect(await redis.pttl(keys.retentionLock())).toBeGreaterThan(50_000);
    expect(await scripts.extendRetentionLock({ token: 't2', ttlMs: 60_000 })).toBe(false);
    await scripts.releaseRetentionLock({ token: 't2' });
    expect(await redis.exists(keys.retentionLock())).toBe(1);
    await scripts.releaseRetentionLock({ token: 't1' });
    expect(await redis.exists(keys.retentionLock())).toBe(0);

    await redis.set(keys.replayClaim('g', '1-0'), 'c1');
    const pipeline = redis.pipeline();
    scripts.queueReleaseReplayClaim(pipeline, { group: 'g', id: '1-0', token: 'c1' });
    expect(await pipeline.exec()).toEqual([[null, 1]]);
    expect(await redis.exists(keys.replayClaim('g', '1-0'))).toBe(0);
  });

  it('reads a backlog bounded by bytes and a stream by XREAD on a connection of the caller’s', async () => {
    const stream = keys.stream(0);
    const { entries } = await EventrailScripts.readBacklog(redis, stream, '0-0', 10, 4 * 1024 * 1024);
    const all = (await redis.xrangeBuffer(stream, '-', '+', 'COUNT', 10)) as Array<[Buffer, Buffer[]]>;
    expect(entries).toEqual(all);
    expect(entries.length).toBeGreaterThan(0);
    const reply = await EventrailScripts.readStream(redis, stream, '0-0', 1, 10);
    expect(reply?.[0][0]).toEqual(Buffer.from(stream));
    expect(reply?.[0][1]).toHaveLength(1);
  });
});
