import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, InvalidOptionError, NonRetryableError, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const MiB = 1024 * 1024;
/** Entries of about 1 MiB each: a page of a thousand of them would be a gigabyte. */
const BIG = 20;

@Injectable()
class Refuser {
  @OnEvent('big', 'ledger')
  refuse(): void {
    throw new NonRetryableError('refused');
  }
}

/** What a page weighs as the budget counts it: ids, field names and values. */
const weight = (offset: string, fields: readonly string[]): number => fields.reduce((sum, f) => sum + f.length, offset.length);

describe('pages are bounded by bytes as well as by count', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let app: INestApplicationContext | undefined;
  /** Stream ids of the big entries (and, between them, small ones of another type), in log order. */
  let bigOffsets: string[];
  let smallOffsets: string[];

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(async () => {
    prefix = uniquePrefix('pgb');
    keys = new EventrailKeys(prefix, 1);
    app = await createApp({ prefix }, [Refuser]);
    bigOffsets = [];
    smallOffsets = [];
    for (let n = 0; n < BIG; n++) {
      // Written as a producer in another language would, past the publisher's own payload limit.
      const data = JSON.stringify({ n, blob: String(n % 10).repeat(MiB - 40) });
      bigOffsets.push((await redis.xadd(keys.stream(0), '*', 'event', 'big', 'data', data)) as string);
      smallOffsets.push((await redis.xadd(keys.stream(0), '*', 'event', 'small', 'data', JSON.stringify({ n }))) as string);
    }
    await waitFor(async () => (await redis.get(keys.offset('ledger', 0))) === smallOffsets[BIG - 1], 'every big event dead-lettered');
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  /** Pages through the log with `options`, checking each page's weight, and returns every offset seen. */
  const pageLog = async (options: { count: number; events?: string[]; maxBytes?: number }, budget: number): Promise<string[][]> => {
    const admin = app!.get(EventrailAdmin);
    const pages: string[][] = [];
    let after: string | undefined;
    for (let i = 0; i < 100; i++) {
      const page = await admin.readLog(0, { ...options, after });
      const raw = await Promise.all(page.entries.map(async (e) => (await redis.xrange(keys.stream(0), e.offset, e.offset))[0]));
      const bytes = raw.reduce((sum, [offset, fields]) => sum + weight(offset, fields), 0);
      if (page.entries.length > 1) expect(bytes).toBeLessThanOrEqual(budget);
      // A page that ended at the budget or the count says next even at the end of the log: the next one is then empty.
      if (page.entries.length > 0) pages.push(page.entries.map((e) => e.offset));
      if (page.next === null) return pages;
      after = page.next;
    }
    throw new Error('paging did not end');
  };

  it('readLog stops a page at maxBytes (4 MiB by default), and next goes through every entry exactly once', async () => {
    const all = (await redis.xrange(keys.stream(0), '-', '+')).map(([offset]) => offset);
    const byDefault = await pageLog({ count: 1000 }, 4 * MiB);
    expect(byDefault.flat()).toEqual(all);
    expect(byDefault[0].filter((o) => bigOffsets.includes(o))).toHaveLength(3); // 3 big ones and the small ones between, under 4 MiB
    const onePerPage = await pageLog({ count: 1000, maxBytes: 1 }, 1);
    expect(onePerPage).toEqual(all.map((o) => [o])); // always at least one entry
    const filtered = await pageLog({ count: 1000, events: ['big'], maxBytes: 2 * MiB + 1024 }, 2 * MiB + 1024);
    expect(filtered.flat()).toEqual(bigOffsets);
    expect(filtered.every((page) => page.length <= 2)).toBe(true);
    const small = await pageLog({ count: 1000, events: ['small'] }, 4 * MiB);
    expect(small).toEqual([smallOffsets]);
  });

  it.each([
    ['oldest first', false],
    ['newest first', true],
  ])(
    'deadLetters stops a page at maxBytes, %s, and the last id goes through every dead letter exactly once',
    async (_label, newestFirst) => {
      const admin = app!.get(EventrailAdmin);
      const key = keys.deadLetters('ledger');
      const all = (await redis.xrange(key, '-', '+')).map(([id]) => id);
      expect(all).toHaveLength(BIG);
      if (newestFirst) all.reverse();
      for (const maxBytes of [undefined, 1, 3 * MiB]) {
        const budget = maxBytes ?? 4 * MiB;
        const seen: string[] = [];
        let after: string | undefined;
        for (let i = 0; i < 100; i++) {
          const page = await admin.deadLetters('ledger', { count: 1000, after, newestFirst, maxBytes });
          if (page.length === 0) break;
          const raw = await Promise.all(page.map(async (l) => (await redis.xrange(key, l.id, l.id))[0]));
          const bytes = raw.reduce((sum, [id, fields]) => sum + weight(id, fields), 0);
          if (page.length > 1) expect(bytes).toBeLessThanOrEqual(budget);
          expect(page.length).toBeLessThanOrEqual(Math.max(1, Math.floor(budget / MiB)));
          seen.push(...page.map((l) => l.id));
          after = page[page.length - 1].id;
        }
        expect(seen).toEqual(all);
      }
    },
  );

  it.each([
    ["'all'", (): 'all' => 'all'],
    ['by ids', (ids: string[]): string[] => ids],
  ])('replays big dead letters %s a few MiB at a time, each once', async (_label, target) => {
    const admin = app!.get(EventrailAdmin);
    const ids = (await redis.xrange(keys.deadLetters('ledger'), '-', '+')).map(([id]) => id);
    const progress: number[] = [];
    expect(await admin.replayDeadLetters('ledger', target(ids), { onProgress: (done) => progress.push(done) })).toBe(BIG);
    // Pages of at most 4 MiB once a letter's size is known (four big letters are over it with their other
    // fields); the first read of a page, before that, asks for 16.
    const steps = progress.map((done, i) => done - (progress[i - 1] ?? 0));
    expect(steps[0]).toBeLessThanOrEqual(16);
    expect(steps.slice(1).every((n) => n <= 3)).toBe(true);
    expect(steps.length).toBeGreaterThan(1);
    expect(progress[progress.length - 1]).toBe(BIG);
    const replayed = (await redis.xrange(keys.stream(0), '-', '+')).filter(([, fields]) => fields.includes('to'));
    expect(replayed).toHaveLength(BIG);
  });

  it('refuses a maxBytes out of range, naming it', async () => {
    const admin = app!.get(EventrailAdmin);
    for (const maxBytes of [0, -1, 1.5, 256 * MiB + 1, Number.NaN]) {
      await expect(admin.readLog(0, { maxBytes })).rejects.toThrow(InvalidOptionError);
      await expect(admin.deadLetters('ledger', { maxBytes })).rejects.toThrow(/maxBytes/);
    }
  });
});
