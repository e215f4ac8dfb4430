import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { randomUUID } from 'node:crypto';
import { EventrailAdmin } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

/**
 * A progress listener that throws (a CLI whose output stream closed) is logged once and not called again,
 * and the operation goes on: its outcome is what the caller waits for. It rejected with the listener's
 * error, after the pages before it were replayed, and the count of what was replayed was lost.
 */
describe('an onProgress listener that throws', () => {
  const LETTERS = 1_200; // three pages of at most 500
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let app: INestApplicationContext;
  let admin: EventrailAdmin;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(async () => {
    prefix = uniquePrefix('progress');
    keys = new EventrailKeys(prefix, 2);
    app = await createApp({ prefix, partitions: 2, retention: { enabled: false, maxLen: 0 } }, []);
    admin = app.get(EventrailAdmin);
    await redis.sadd(keys.groups, 'billing');
  });
  afterEach(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  /** `count` dead letters of well-formed keyless entries, as a sink writes them; their ids. */
  async function letters(count: number): Promise<string[]> {
    const pipeline = redis.pipeline();
    for (let n = 0; n < count; n++) {
      pipeline.xadd(
        keys.deadLetters('billing'),
        '*',
        ...['id', randomUUID(), 'event', 'order.placed', 'data', JSON.stringify({ n })],
        ...['group', 'billing', 'partition', String(n % 2), 'offset', `${n + 1}-0`, 'reason', 'retries-exhausted', 'attempts', '1'],
      );
    }
    return ((await pipeline.exec()) ?? []).map(([, id]) => id as string);
  }
  const logLength = async (): Promise<number> => (await redis.xlen(keys.stream(0))) + (await redis.xlen(keys.stream(1)));

  /** A listener that throws at its `at`-th call, and how many calls it got. */
  function throwing(at: number): { listener: (done: number) => void; calls: number[] } {
    const calls: number[] = [];
    return {
      calls,
      listener: (done) => {
        calls.push(done);
        if (calls.length === at) throw new Error('EPIPE: the output went away');
      },
    };
  }

  it.each([1, 2, 3])("replay 'all': thrown at its call %i, the replay goes on and answers every letter", async (at) => {
    await letters(LETTERS);
    const { listener, calls } = throwing(at);
    await expect(admin.replayDeadLetters('billing', 'all', { onProgress: listener })).resolves.toBe(LETTERS);
    expect(calls).toHaveLength(at);
    expect([await redis.xlen(keys.deadLetters('billing')), await logLength()]).toEqual([0, LETTERS]);
  });

  it('replay by ids: thrown at its first call, the replay goes on and answers every letter', async () => {
    const ids = await letters(LETTERS);
    const { listener, calls } = throwing(1);
    await expect(admin.replayDeadLetters('billing', ids, { onProgress: listener })).resolves.toBe(LETTERS);
    expect(calls).toHaveLength(1);
    expect([await redis.xlen(keys.deadLetters('billing')), await logLength()]).toEqual([0, LETTERS]);
  });

  it('an async listener that rejects: no unhandled rejection, not called again, the replay answers every letter', async () => {
    await letters(LETTERS);
    const unhandled: unknown[] = [];
    const record = (reason: unknown): void => void unhandled.push(reason);
    process.on('unhandledRejection', record);
    try {
      const calls: number[] = [];
      const listener = async (done: number): Promise<void> => {
        calls.push(done);
        throw new Error('EPIPE: the output went away');
      };
      // Typed as a listener returns (void), as an async function passed to it is.
      const onProgress = listener as (done: number) => void;
      await expect(admin.replayDeadLetters('billing', 'all', { onProgress })).resolves.toBe(LETTERS);
      await new Promise((resolve) => setImmediate(resolve));
      // Its rejection is seen a few microtasks later: the next page may call it once more before that.
      expect(calls.length).toBeLessThanOrEqual(2);
      expect(unhandled).toEqual([]);
      expect([await redis.xlen(keys.deadLetters('billing')), await logLength()]).toEqual([0, LETTERS]);
    } finally {
      process.off('unhandledRejection', record);
    }
  });

  it('a retention run: thrown at its first call, the run goes on over every partition and answers', async () => {
    const { listener, calls } = throwing(1);
    const result = await admin.runRetention({ onProgress: listener });
    expect(calls).toEqual([1]);
    expect(result).toBeDefined();
  });
});
