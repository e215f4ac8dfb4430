import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';

export function testRedisUrl(): string {
  const url = process.env.EVENTRAIL_TEST_REDIS_URL;
  if (!url) throw new Error('EVENTRAIL_TEST_REDIS_URL is not set: run the tests through jest (its global setup starts Redis)');
  return url;
}

/** A key prefix of its own for each test, so tests never see each other's keys. */
export function uniquePrefix(name = 't'): string {
  return `${name}-${randomBytes(5).toString('hex')}`;
}

/** Deletes every key under `prefix`: eventrail's (`P:*`, `{P:*`) and any other there (the benchmark's BullMQ queues and raw references). */
export async function deletePrefix(redis: Redis, prefix: string): Promise<void> {
  for (const pattern of [`${prefix}:*`, `{${prefix}:*`]) {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await redis.unlink(...keys);
    } while (cursor !== '0');
  }
}

/** Polls `predicate` until it holds; fails with `message` after `timeoutMs`. Never a fixed sleep. */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  message: string | (() => string),
  timeoutMs = 20_000,
  intervalMs = 25,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await predicate();
      if (value) return value as NonNullable<T>;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      const text = typeof message === 'function' ? message() : message;
      throw new Error(`Timed out after ${timeoutMs} ms waiting for: ${text}${last ? ` (last error: ${(last as Error).message})` : ''}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
