import type { Redis } from 'ioredis';
import type { EventrailKeys } from '../../lib/redis/keys';

/** An event a test produced: its key and its number within that key (1, 2, ...). */
export interface ProducedEvent {
  key: string;
  n: number;
}

/** One handler call a test recorded. */
export interface HandledEvent {
  group: string;
  key: string;
  n: number;
}

/**
 * Every group handled every produced event, in order per key: a repeat may
 * replay what came before, never skip ahead of an event not handled yet.
 */
export function expectEveryEventInKeyOrder(groups: readonly string[], produced: ProducedEvent[], handlings: HandledEvent[]): void {
  for (const group of groups) {
    const seen = new Map<string, Set<number>>();
    const violations: string[] = [];
    for (const h of handlings.filter((x) => x.group === group)) {
      const done = seen.get(h.key) ?? new Set<number>();
      seen.set(h.key, done);
      if (!done.has(h.n))
        for (let m = 1; m < h.n; m++) if (!done.has(m)) violations.push(`${group} ${JSON.stringify(h.key)} #${h.n} before #${m}`);
      done.add(h.n);
    }
    expect(violations.slice(0, 5)).toEqual([]);
    const missing = produced.filter((p) => !seen.get(p.key)?.has(p.n)).map((p) => `${JSON.stringify(p.key)} #${p.n}`);
    expect({ group, missing }).toEqual({ group, missing: [] });
  }
}

/** True when each group's committed offset of each partition is the partition's last entry. */
export async function offsetsAtEnd(redis: Redis, keys: EventrailKeys, groups: readonly string[], partitions: number): Promise<boolean> {
  for (let p = 0; p < partitions; p++) {
    const last = (await redis.xrevrange(keys.stream(p), '+', '-', 'COUNT', 1))[0]?.[0];
    for (const group of groups) if ((await redis.get(keys.offset(group, p))) !== (last ?? null)) return false;
  }
  return true;
}
