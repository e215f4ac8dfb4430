import Redis from 'ioredis';
import { EventrailScripts } from '../../lib/redis/eventrail-scripts';
import { EventrailKeys } from '../../lib/redis/keys';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

/**
 * The parked floor (the oldest parked id, which retention keeps) as the commit script writes it: sent
 * by the owner with the lines' changes, or worked out from every stored line when a caller sends none.
 */
describe('commitOffset-5.lua: the parked floor', () => {
  const prefix = uniquePrefix('parked-floor');
  const keys = new EventrailKeys(prefix, 1);
  const base = { group: 'g', partition: 0, ttlMs: 60_000, markTtlMs: 0, doneIds: [] as string[] };
  let redis: Redis;
  let scripts: EventrailScripts;
  let token: string;

  const line = (ids: string[]) => JSON.stringify({ ids, k: 'A', a: 1, f: 1, n: 1, e: '', t: ids[ids.length - 1], r: 0, c: 0 });
  const floor = () => redis.hget(keys.recovery('g', 0), 'parkedFloor');
  const commit = (offset: string, parked: Array<[string, string]>) => scripts.commitOffset({ ...base, token, offset, parked });

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    scripts = new EventrailScripts(redis, keys);
    for (const id of ['1-0', '2-0', '3-0', '4-0', '5-0']) await redis.xadd(keys.stream(0), id, 'type', 'a');
    const lease = await scripts.acquireLease({
      group: 'g',
      partition: 0,
      ttlMs: 60_000,
      workerId: 'w1',
      initialMode: 'start',
      initialId: '',
      generation: '0',
    });
    token = lease!.token;
  });
  afterAll(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('works the floor out from every line when the caller sends none', async () => {
    expect(
      await commit('1-0', [
        ['park:k:B', line(['3-0', '4-0'])],
        ['park:k:A', line(['2-0'])],
      ]),
    ).toBe(true);
    expect(await floor()).toBe('2-0');
    expect(await commit('1-0', [['park:k:A', '']])).toBe(true);
    expect(await floor()).toBe('3-0');
  });

  it('writes the floor the owner sends, and removes it when the owner sends none parked', async () => {
    expect(
      await commit('2-0', [
        ['park:k:B', line(['4-0'])],
        ['parkedFloor', '4-0'],
      ]),
    ).toBe(true);
    expect(await floor()).toBe('4-0');
    expect(
      await commit('3-0', [
        ['park:k:B', ''],
        ['parkedFloor', ''],
      ]),
    ).toBe(true);
    expect(await floor()).toBeNull();
    expect(await redis.get(keys.offset('g', 0))).toBe('3-0');
  });

  it('refuses a floor that is not a stream id, or one not sent last, before it writes anything', async () => {
    await expect(
      commit('4-0', [
        ['park:k:C', line(['5-0'])],
        ['parkedFloor', 'oops'],
      ]),
    ).rejects.toThrow(/the parked floor is not a stream id: oops/);
    await expect(
      commit('4-0', [
        ['parkedFloor', '5-0'],
        ['park:k:C', line(['5-0'])],
      ]),
    ).rejects.toThrow(/not a parked line field: parkedFloor/);
    expect(await redis.hget(keys.recovery('g', 0), 'park:k:C')).toBeNull();
    expect(await redis.get(keys.offset('g', 0))).toBe('3-0');
  });
});
