import Redis from 'ioredis';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailClient, registerScripts } from '../../lib/redis/scripts';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

describe('lease and commit scripts', () => {
  const prefix = uniquePrefix('scripts');
  const keys = new EventrailKeys(prefix, 1);
  let redis: Redis;
  let client: EventrailClient;
  const acquire = (worker: string, ttl = 60_000): Promise<[string, string, number] | null> =>
    client.eventrailAcquireLease(
      keys.lease('g', 0),
      keys.epoch('g', 0),
      keys.offset('g', 0),
      keys.stream(0),
      keys.recovery('g', 0),
      worker,
      ttl,
      'start',
      '',
    );
  const commit = (token: string, id: string): Promise<number> =>
    client.eventrailCommitOffset(
      keys.lease('g', 0),
      keys.offset('g', 0),
      keys.done('g', 0),
      keys.recovery('g', 0),
      keys.stream(0),
      token,
      id,
      60_000,
      0,
      '',
      '',
      '',
      '0',
      0,
    );
  const release = (token: string): Promise<number> =>
    client.eventrailReleaseLease(keys.lease('g', 0), keys.recovery('g', 0), token, token.slice(token.lastIndexOf(':') + 1));
  const offset = (): Promise<string | null> => redis.get(keys.offset('g', 0));

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
    client = registerScripts(redis);
  });
  afterAll(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('fences a worker whose lease was taken over, and never moves the offset backwards', async () => {
    const a = await acquire('worker-a');
    expect(a).toEqual(['worker-a:1', '0-0', 0]); // first owner ever: nothing to recover from
    expect(await acquire('worker-b')).toBeNull(); // held
    expect(await commit(a![0], '5-0')).toBe(1);
    expect(await offset()).toBe('5-0');

    // A pauses past its lease (shortened here rather than waited for); B takes over with a new epoch.
    await redis.pexpire(keys.lease('g', 0), 1);
    await waitFor(async () => (await redis.exists(keys.lease('g', 0))) === 0, 'lease of A expired');
    const b = await acquire('worker-b');
    expect(b).toEqual(['worker-b:2', '5-0', 1]); // A never released: B recovers
    expect(await commit(b![0], '9-0')).toBe(1);

    // A wakes up and tries to commit: refused, nothing changes.
    expect(await commit(a![0], '7-0')).toBe(0);
    expect(await commit(a![0], '12-0')).toBe(0);
    expect(await offset()).toBe('9-0');

    // The owner itself cannot move it backwards either; ids compare numerically.
    expect(await commit(b![0], '3-0')).toBe(1);
    expect(await commit(b![0], '10-0')).toBe(1);
    expect(await offset()).toBe('10-0');
    expect(await commit(b![0], '9-18446744073709551615')).toBe(1);
    expect(await offset()).toBe('10-0');

    // Released leases can be taken at once; a stale token cannot release someone else's.
    expect(await release(a![0])).toBe(0);
    expect(await release(b![0])).toBe(1);
    expect(await acquire('worker-c')).toEqual(['worker-c:3', '10-0', 0]); // clean hand-over: no recovery
  });

  it('tells a new owner to recover only when the previous one did not release, and counts deliveries per entry', async () => {
    const crash = async (): Promise<void> => {
      await redis.pexpire(keys.lease('g', 0), 1);
      await waitFor(async () => (await redis.exists(keys.lease('g', 0))) === 0, 'lease expired');
    };
    await redis.del(keys.lease('g', 0), keys.recovery('g', 0), keys.epoch('g', 0));
    const first = await acquire('crashy-1');
    expect(first?.[2]).toBe(0);
    await crash();
    const second = await acquire('crashy-2');
    expect(second?.[2]).toBe(1);
    expect(await release(second![0])).toBe(1);
    expect((await acquire('crashy-3'))?.[2]).toBe(0);

    const mark = (offset: string): Promise<number> => client.eventrailMarkDelivery(keys.recovery('g', 0), offset);
    expect([await mark('11-0'), await mark('11-0'), await mark('11-0')]).toEqual([1, 2, 3]);
    expect(await mark('12-0')).toBe(1); // another entry: counted from 1
  });

  it('renews only the holder, and lets a restarted incarnation of the same worker take its own lease back', async () => {
    await redis.del(keys.lease('g', 0));
    const first = await acquire('host:1:abc');
    expect(await client.eventrailRenewLease(keys.lease('g', 0), 'someone:9', 1000)).toBe(0);
    expect(await client.eventrailRenewLease(keys.lease('g', 0), first![0], 1000)).toBe(1);
    const again = await acquire('host:1:abc');
    expect(again?.[0]).not.toBe(first![0]);
    expect(await commit(first![0], '20-0')).toBe(0);
  });
});
