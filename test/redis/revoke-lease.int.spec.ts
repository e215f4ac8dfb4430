import Redis from 'ioredis';
import { EventrailScripts } from '../../lib/redis/eventrail-scripts';
import { EventrailKeys } from '../../lib/redis/keys';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

/**
 * A forced offset reset and a bar take a lease from its holder without its
 * consent. The lease stays revoked ("revoked:<token>") for the rest of its
 * TTL: the holder is fenced at once, and nobody, the holder included, takes
 * the partition until the holder clears it (its handlers have ended) or its
 * lease would have expired anyway.
 */
describe('revoked leases (resetOffset-6.lua, barMembers-2.lua, releaseLease-2.lua)', () => {
  const prefix = uniquePrefix('revoke-script');
  const keys = new EventrailKeys(prefix, 1);
  const group = 'g';
  let redis: Redis;
  let scripts: EventrailScripts;

  beforeEach(() => {
    redis = new Redis(testRedisUrl());
    scripts = new EventrailScripts(redis, keys);
  });

  afterEach(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  const acquire = (workerId: string, ttlMs: number) =>
    scripts.acquireLease({ group, partition: 0, workerId, ttlMs, initialMode: 'start', initialId: '', generation: '0' });

  const revokers: Array<[string, (holder: string) => Promise<unknown>]> = [
    ['a forced offset reset', () => scripts.resetOffset({ group, partition: 0, to: '0-0' })],
    ['a bar on the holder', (holder) => scripts.barMembers({ group, partition: 0, workerIds: [holder], ttlMs: 60_000 })],
    [
      'a bar on others, the holder not among the able',
      () => scripts.barMembers({ group, partition: 0, workerIds: ['w-c'], ttlMs: 60_000, able: ['w-b'] }),
    ],
  ];

  it.each(revokers)('%s fences the holder and keeps the partition from everyone until the holder clears it', async (_, revoke) => {
    const held = await acquire('w-a', 20_000);
    expect(held).not.toBeNull();
    const token = held!.token;
    await revoke('w-a');

    expect(await redis.get(keys.lease(group, 0))).toBe(`revoked:${token}`);
    const left = await redis.pttl(keys.lease(group, 0));
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThanOrEqual(20_000);
    expect(await scripts.renewLease({ group, partition: 0, token, ttlMs: 20_000 })).toBe(false);
    expect(await scripts.commitOffset({ group, partition: 0, token, ttlMs: 20_000, offset: '1-0', markTtlMs: 0, doneIds: [] })).toBe(false);
    expect(await acquire('w-b', 20_000)).toBeNull();
    expect(await acquire('w-a', 20_000)).toBeNull();
    // A second revocation leaves it as it is (its TTL is not extended).
    await scripts.resetOffset({ group, partition: 0, to: '0-0' });
    expect(await redis.get(keys.lease(group, 0))).toBe(`revoked:${token}`);
    expect(await redis.pttl(keys.lease(group, 0))).toBeLessThanOrEqual(left);

    // Another token cannot clear it; the holder's can.
    await scripts.releaseLease({ group, partition: 0, token: 'w-b:99', epoch: '99' });
    expect(await redis.get(keys.lease(group, 0))).toBe(`revoked:${token}`);
    await scripts.releaseLease({ group, partition: 0, token, epoch: token.split(':').pop()! });
    expect(await redis.exists(keys.lease(group, 0))).toBe(0);
    expect(await acquire('w-b', 20_000)).not.toBeNull();
  });

  it('a revoked lease whose holder never clears it frees the partition when the lease would have expired', async () => {
    const held = await acquire('w-a', 400);
    await scripts.resetOffset({ group, partition: 0, to: '0-0' });
    expect(await redis.get(keys.lease(group, 0))).toBe(`revoked:${held!.token}`);
    expect(await acquire('w-b', 400)).toBeNull();
    let taken: Awaited<ReturnType<typeof acquire>> = null;
    await waitFor(async () => (taken = await acquire('w-b', 20_000)) !== null, 'w-b takes the partition once the TTL ran out', 5_000);
    // The reset recorded a clean release: the new owner does not recover as after a crash.
    expect(taken!.previousHolder).toBe('released');
  });
});
