import type Redis from 'ioredis';
import { readEntry } from '../../../lib/wire/codec';
import type { EventrailKeys } from '../../../lib/redis/keys';
import type { Handling } from './chaos-protocol';
import { PARKED_FIELD_PREFIX } from '../../../lib/consumer/handling/parked-lines';

/** One entry of the log as the stream holds it. */
export interface LogEntry {
  partition: number;
  offset: string;
  /** Event id (the same id appears twice when an append was repeated). */
  id: string;
  key: string;
  seq: number;
}

/** Every entry of every partition, in stream order per partition. */
export async function readLog(redis: Redis, keys: EventrailKeys): Promise<LogEntry[][]> {
  const partitions: LogEntry[][] = [];
  for (let p = 0; p < keys.partitions; p++) {
    const entries = await redis.xrange(keys.stream(p), '-', '+');
    partitions.push(
      entries.map(([offset, list]) => {
        const fields: Record<string, string> = {};
        for (let i = 0; i + 1 < list.length; i += 2) fields[list[i]] = list[i + 1];
        // The event id as consumers see it: the entry's own, or the one derived from its position.
        const { id } = readEntry(offset, list, { partition: p, logTag: keys.logTag }) as { id: string };
        return { partition: p, offset, id, key: fields.key ?? '', seq: (JSON.parse(fields.data) as { seq: number }).seq };
      }),
    );
  }
  return partitions;
}

export function entryRef(partition: number, offset: string): string {
  return `${partition}|${offset}`;
}

/**
 * Per key, in the order Redis applied the handlers' records: every handling
 * of an entry must come after at least one handling of every earlier entry
 * of its key (earlier in its partition's stream). A redelivery of an older
 * entry after newer ones is fine; an entry handled while an earlier one of
 * its key never was is not. Returns the violations (at most `limit`).
 */
export function keyOrderViolations(log: readonly LogEntry[][], handlings: readonly Handling[], limit = 20): string[] {
  // Position of each entry among the entries of its key.
  const position = new Map<string, { key: string; index: number; seq: number }>();
  const perKey = new Map<string, LogEntry[]>();
  for (const partition of log) {
    for (const entry of partition) {
      const list = perKey.get(entry.key) ?? [];
      perKey.set(entry.key, list);
      position.set(entryRef(entry.partition, entry.offset), { key: entry.key, index: list.length, seq: entry.seq });
      list.push(entry);
    }
  }
  const handled = new Map<string, boolean[]>();
  // Per key: how many entries from the first one on have all been handled.
  const prefix = new Map<string, number>();
  const violations: string[] = [];
  for (const h of handlings) {
    const at = position.get(entryRef(h.partition, h.offset));
    if (!at) {
      violations.push(`handling of ${h.partition}|${h.offset} by pid ${h.pid}: no such entry in the log`);
      continue;
    }
    const done = handled.get(at.key) ?? [];
    handled.set(at.key, done);
    let first = prefix.get(at.key) ?? 0;
    if (at.index > first) {
      const missing = (perKey.get(at.key) as LogEntry[])[first];
      violations.push(
        `key ${at.key}: seq ${at.seq} (${h.partition}|${h.offset}) handled by pid ${h.pid} ` +
          `before seq ${missing.seq} (${missing.partition}|${missing.offset}) had ever been handled`,
      );
    }
    done[at.index] = true;
    while (done[first]) first++;
    prefix.set(at.key, first);
    if (violations.length >= limit) break;
  }
  return violations;
}

/** Committed offset and last stream id of every partition of `group`. */
export async function offsetsAndEnds(
  redis: Redis,
  keys: EventrailKeys,
  group: string,
): Promise<Array<{ committed: string | null; last: string | null }>> {
  const pipeline = redis.pipeline();
  for (let p = 0; p < keys.partitions; p++) {
    pipeline.get(keys.offset(group, p));
    pipeline.xrevrange(keys.stream(p), '+', '-', 'COUNT', 1);
  }
  const replies = (await pipeline.exec()) ?? [];
  const out: Array<{ committed: string | null; last: string | null }> = [];
  for (let p = 0; p < keys.partitions; p++) {
    const [offsetError, committed] = replies[2 * p] ?? [];
    const [lastError, last] = replies[2 * p + 1] ?? [];
    if (offsetError) throw offsetError;
    if (lastError) throw lastError;
    const newest = last as Array<[string, string[]]>;
    out.push({ committed: committed as string | null, last: newest.length ? newest[0][0] : null });
  }
  return out;
}

/** True when every non-empty partition's committed offset is its stream's last id. */
export async function offsetsCoverLog(redis: Redis, keys: EventrailKeys, group: string): Promise<boolean> {
  const state = await offsetsAndEnds(redis, keys, group);
  return state.every(({ committed, last }) => last === null || committed === last);
}

/**
 * Whether any partition of `group` still holds a parked line ('key' and
 * 'unordered' ordering): the committed offset moves past a parked message, so
 * offsets at the end of the log do not mean the group is done.
 */
export async function hasParkedLines(redis: Redis, keys: EventrailKeys, group: string): Promise<boolean> {
  for (let p = 0; p < keys.partitions; p++) {
    const fields = await redis.hkeys(keys.recovery(group, p));
    if (fields.some((field) => field.startsWith(PARKED_FIELD_PREFIX))) return true;
  }
  return false;
}
