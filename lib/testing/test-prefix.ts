import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import { InvalidOptionError } from '../errors/invalid-option.error';

/** A key prefix of one test's own, and the way to remove what was written under it. */
export interface TestPrefix {
  /** Pass it as the module's `prefix`: `<name>-<10 hex digits>`. */
  readonly prefix: string;
  /** Deletes every key under the prefix (eventrail's and any other `<prefix>:*`); resolves with how many went. */
  delete(): Promise<number>;
}

/**
 * A fresh prefix for one test (or one test file), so tests never see each
 * other's events, offsets or dead letters and can run against one Redis side
 * by side, and a `delete()` for `afterEach` / `afterAll`. Nothing is flushed:
 * only keys under this prefix are removed, on a connection of its own to
 * `redisUrl` that `delete()` opens and closes.
 */
export function createTestPrefix(redisUrl: string, name = 'test'): TestPrefix {
  if (typeof redisUrl !== 'string' || redisUrl.length === 0)
    throw new InvalidOptionError('createTestPrefix redisUrl', redisUrl, 'a redis:// URL');
  const prefix = uniquePrefix(name);
  return {
    prefix,
    async delete() {
      const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
      redis.on('error', () => undefined);
      try {
        await redis.connect();
        return await deletePrefix(redis, prefix);
      } finally {
        redis.disconnect();
      }
    },
  };
}

/** `<name>-<10 random hex digits>`. */
export function uniquePrefix(name = 'test'): string {
  // Kept to characters that cannot clash with the key syntax: `:` separates, `{}` make hash tags.
  if (typeof name !== 'string' || !/^[\w.-]{1,64}$/.test(name)) {
    throw new InvalidOptionError('test prefix name', name, 'letters, digits, ".", "_" or "-" (1 to 64)');
  }
  return `${name}-${randomBytes(5).toString('hex')}`;
}

/**
 * Deletes every key under `prefix` on a standalone Redis (SCAN + UNLINK, never
 * FLUSHDB): eventrail's (`<prefix>:*`, and the hash-tagged `{<prefix>:*`) and
 * any other key of the application's there. Resolves with how many went.
 */
export async function deletePrefix(redis: Redis, prefix: string): Promise<number> {
  let deleted = 0;
  for (const pattern of [`${prefix}:*`, `{${prefix}:*`]) {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) deleted += await redis.unlink(...keys);
    } while (cursor !== '0');
  }
  return deleted;
}
