import Redis from 'ioredis';
import { EventrailKeys } from '../../lib/redis/keys';
import { countEntriesAfter } from '../../lib/consumer/coordination/lag';
import { GroupFactsReader } from '../../lib/admin/group-facts.reader';
import { GroupStatusReader } from '../../lib/admin/group-status.reader';
import type { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { registerScripts } from '../../lib/redis/scripts';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

/**
 * A caller that gave up (a health check past its timeout) must not leave a
 * lag count paging on behind it. The client here is the real one; the proxy
 * only counts the XRANGE pages it sends and fires the abort after the first.
 */
describe('aborting a lag count', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  /** Entry ids per partition. */
  let ids: string[][];

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    registerScripts(redis); // the status reader asks the lag script first, then counts (no position here)
    prefix = uniquePrefix('lagabort');
    keys = new EventrailKeys(prefix, 2);
    // 6 000 entries in each partition: counting the lag after the middle takes several pages of 1 000 per side.
    ids = [];
    for (const p of [0, 1]) {
      const pipeline = redis.pipeline();
      for (let n = 0; n < 6_000; n++) pipeline.xadd(keys.stream(p), '*', 'event', 'e', 'data', '{}');
      ids.push(((await pipeline.exec()) ?? []).map(([, id]) => id as string));
    }
  });
  afterAll(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  /** The real client, counting XRANGE calls and aborting `controller` once the first page has come back. */
  const counting = (controller: AbortController): { client: Redis; pages: () => number } => {
    let pages = 0;
    const client = new Proxy(redis, {
      get(target, property, receiver) {
        if (property !== 'xrange') return Reflect.get(target, property, receiver) as unknown;
        return (...args: Parameters<Redis['xrange']>) => {
          pages += 1;
          return target.xrange(...args).then((page) => {
            controller.abort(new Error('caller gave up'));
            return page;
          });
        };
      },
    });
    return { client, pages: () => pages };
  };

  it('sends no page after the signal fired, and rejects with its reason', async () => {
    // Without a signal, the same count reads several pages.
    const free = counting(new AbortController());
    expect(await countEntriesAfter(free.client, keys.stream(0), ids[0][2_999])).toEqual({ lag: 3_000, capped: false });
    expect(free.pages()).toBeGreaterThan(3);

    const controller = new AbortController();
    const aborted = counting(controller);
    await expect(countEntriesAfter(aborted.client, keys.stream(0), ids[0][2_999], undefined, controller.signal)).rejects.toThrow(
      'caller gave up',
    );
    expect(aborted.pages()).toBe(1);

    // Already aborted: nothing is sent at all.
    const none = counting(new AbortController());
    await expect(countEntriesAfter(none.client, keys.stream(0), ids[0][2_999], undefined, AbortSignal.abort())).rejects.toThrow();
    expect(none.pages()).toBe(0);
  });

  it('stops a group status read: no lag count starts once the signal fired', async () => {
    // The group committed the middle of both partitions.
    await Promise.all([0, 1].map((p) => redis.set(keys.offset('g', p), ids[p][2_999])));
    const controller = new AbortController();
    const { client, pages } = counting(controller);
    const eventrailRedis = { client, keys } as unknown as EventrailRedis;
    const reader = new GroupStatusReader(eventrailRedis, new GroupFactsReader(eventrailRedis));

    // Without a signal, the count reads several pages per partition.
    expect((await reader.read('g')).lag).toBe(2 * 3_000);
    expect(pages()).toBeGreaterThan(6);

    const before = pages();
    const read = reader.read('g', { signal: controller.signal });
    controller.abort(new Error('caller gave up'));
    await expect(read).rejects.toThrow('caller gave up');
    expect(pages() - before).toBe(0);
  });
});
