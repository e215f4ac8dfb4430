export function testRedisUrl(): string {
  const url = process.env.EVENTRAIL_TEST_REDIS_URL;
  if (!url) throw new Error('EVENTRAIL_TEST_REDIS_URL is not set: run the tests through jest (its global setup starts Redis)');
  return url;
}

// Shared with users' tests through the testing entry point (`nestjs-eventrail/testing`).
export { deletePrefix, uniquePrefix } from '../../lib/testing/test-prefix';

/**
 * Polls `predicate` until it holds; fails with `message` after `timeoutMs` (a function is called then, and
 * may read what the test can see, to say why). Never a fixed sleep.
 */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  message: string | (() => string | Promise<string>),
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
      const text = typeof message === 'function' ? await Promise.resolve(message()).catch((error: Error) => `(${error.message})`) : message;
      throw new Error(`Timed out after ${timeoutMs} ms waiting for: ${text}${last ? ` (last error: ${(last as Error).message})` : ''}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
