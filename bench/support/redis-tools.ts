import type Redis from 'ioredis';

/** `INFO <section>` as a map of field to value. */
export async function info(redis: Redis, section: string): Promise<Map<string, string>> {
  const text = await redis.info(section);
  const fields = new Map<string, string>();
  for (const line of text.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

/** Redis `used_memory` in bytes. */
export async function usedMemory(redis: Redis): Promise<number> {
  return Number((await info(redis, 'memory')).get('used_memory'));
}

/** Commands Redis has run so far, from `INFO commandstats`, leaving out `INFO` (the benchmark's own). */
export async function commandCount(redis: Redis): Promise<number> {
  let total = 0;
  for (const [name, value] of await info(redis, 'commandstats')) {
    if (name === 'cmdstat_info') continue;
    total += Number(/calls=(\d+)/.exec(value)?.[1] ?? 0);
  }
  return total;
}

/** ioredis options for a `redis://` URL, for BullMQ (its workers need `maxRetriesPerRequest: null`). */
export function connectionOptions(url: string): {
  host: string;
  port: number;
  username?: string;
  password?: string;
  db: number;
  maxRetriesPerRequest: null;
} {
  const parsed = new URL(url);
  return {
    host: parsed.hostname,
    port: Number(parsed.port || 6379),
    username: parsed.username ? decodeURIComponent(parsed.username) : undefined,
    password: parsed.password ? decodeURIComponent(parsed.password) : undefined,
    db: Number(parsed.pathname.slice(1) || 0),
    maxRetriesPerRequest: null,
  };
}
