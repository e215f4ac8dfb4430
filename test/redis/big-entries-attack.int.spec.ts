import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailPublisher } from '../../lib';
import { BIG_ENTRY_BYTES } from '../../lib/redis/big-entries';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { eventNear, indexMismatch, publishEveryWay, publishPastRunLimits, targetNear } from '../support/big-entries-attack';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';
import { seededRandom } from '../support/seeded-random';

/**
 * Attacks on the run scripts being told their big entries (the scripts facade weighs each event with
 * bigOrdinals and names the big ones; appendMany-n and appendManyDedup-n weigh nothing): every entry
 * eventrail appends over the line by the rule (UTF-8 bytes of every field name and value, 8 bytes per
 * field, 8 + 41 for the id) is in its partition's index, and no entry at or under the line is, checked
 * against the entries read back from Redis.
 */
describe('the index of big entries, against the entries read back', () => {
  const partitions = 3;
  let redis: Redis;
  const apps: INestApplicationContext[] = [];
  const prefixes: string[] = [];

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });
  afterAll(async () => {
    for (const prefix of prefixes) await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it.each([
    ['dedup on', 60_000],
    ['dedup off', 0],
  ])(
    'indexes exactly the big entries of 4 seeds x 700 events within bytes of the line (multi-byte, escaped, astral and lone-surrogate data, keys, names, headers and ids; lone, coalesced, publishMany of few and of hundreds), %s',
    async (_, dedupWindowMs) => {
      const problems: string[] = [];
      let nearTheLine = 0;
      const edge = { onTheLine: 0, justOver: 0 };
      for (let seed = 1; seed <= 4; seed++) {
        const prefix = uniquePrefix(`bigattack${seed}`);
        prefixes.push(prefix);
        const app = await createApp({ prefix, partitions, maxPayloadBytes: 1024 * 1024, dedupWindowMs });
        apps.push(app);
        const random = seededRandom(dedupWindowMs + seed);
        const events = Array.from({ length: 700 }, (_, n) => eventNear(random, n, targetNear(random), partitions, true));
        const publisher = app.get(EventrailPublisher);
        await publishEveryWay(publisher, events, random);
        if (seed === 1) await publishPastRunLimits(publisher, random, partitions, events.length);
        nearTheLine += events.filter((e) => Math.abs(e.ruleBytes - BIG_ENTRY_BYTES) <= 8).length;
        const keys = new EventrailKeys(prefix, partitions);
        for (let p = 0; p < partitions; p++) {
          const { missing, extra, big, entries, onTheLine, justOver } = await indexMismatch(redis, keys, p);
          edge.onTheLine += onTheLine;
          edge.justOver += justOver;
          if (missing.length > 0) problems.push(`seed ${seed} p${p}: ${missing.length} of ${big} big not indexed: ${missing.slice(0, 3)}`);
          if (extra.length > 0) problems.push(`seed ${seed} p${p}: ${extra.length} indexed not big: ${extra.slice(0, 3)}`);
          if (entries === 0) problems.push(`seed ${seed} p${p}: no entries`);
        }
      }
      expect(problems).toEqual([]);
      // The generator lands on the line: a third of the entries within 8 bytes of it, and read back, entries
      // exactly on it and one byte over.
      expect(nearTheLine).toBeGreaterThan(500);
      expect(edge.onTheLine).toBeGreaterThan(10);
      expect(edge.justOver).toBeGreaterThan(10);
    },
  );
});
