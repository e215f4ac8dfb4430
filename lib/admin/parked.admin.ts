import type { EventrailRedis } from '../redis/eventrail-redis';
import { PARKED_COMMAND_PREFIX, PARKED_FIELD_PREFIX, parseLine } from '../consumer/handling/parked-lines';
import { isMalformed, readEntry } from '../wire/codec';
import { compareStreamIds } from '../wire/stream-id';
import type { ParkedKey } from './admin.types';

/**
 * Reads the parked lines of a group (`'key'` and `'unordered'` ordering) and leaves commands for their
 * owner. The owner of a partition holds its lines in memory and alone changes them (fenced by its
 * lease), so a retry or give-up is a command field in the partition's recovery hash, which the owner
 * applies when it is told (the rebalance signal) or when it takes the partition.
 */
export class ParkedAdmin {
  constructor(private readonly redis: EventrailRedis) {}

  /** Every parked line of `group`, by partition then oldest first. */
  async list(group: string): Promise<ParkedKey[]> {
    const { client, keys } = this.redis;
    const hashes = await Promise.all(Array.from({ length: keys.partitions }, (_, p) => client.hgetall(keys.recovery(group, p))));
    const found: Array<Omit<ParkedKey, 'eventId' | 'event'>> = [];
    hashes.forEach((fields, partition) => {
      for (const [field, value] of Object.entries(fields)) {
        if (!field.startsWith(PARKED_FIELD_PREFIX)) continue;
        const line = parseLine(value);
        if (!line) continue;
        found.push({
          key: line.k,
          partition,
          offset: line.ids[0],
          count: line.ids.length,
          attempts: line.a,
          firstFailedAt: line.f > 0 ? new Date(line.f) : null,
          // 0: due at once (after a counted crash, a release, an operator's retry).
          nextAttemptAt: new Date(line.n > 0 ? line.n : Date.now()),
          error: line.e,
        });
      }
    });
    found.sort((a, b) => a.partition - b.partition || compareStreamIds(a.offset, b.offset));
    // The head's event id and type, read from the log (one round trip for all of them).
    const heads = await Promise.all(found.map((f) => client.xrange(keys.stream(f.partition), f.offset, f.offset)));
    return found.map((rest, i) => {
      const reply = heads[i][0];
      const entry = reply ? readEntry(reply[0], reply[1], { partition: rest.partition, logTag: keys.logTag }) : undefined;
      const known = entry && !isMalformed(entry) ? entry : undefined;
      return { ...rest, eventId: known?.id ?? null, event: known?.event ?? null };
    });
  }

  /**
   * Leaves a command for the owners of `group`'s partitions: `retry` (every line, or the line of `key`,
   * tried at once) or `give-up` (the head of `key`'s line dead-lettered at once). Answers how many
   * partitions hold a matching line now.
   */
  async command(group: string, op: 'retry' | 'give-up', key: string | undefined): Promise<number> {
    const { client, keys } = this.redis;
    const heads = new Map<number, string[]>();
    for (const line of await this.list(group)) {
      if (key === undefined || line.key === key) heads.set(line.partition, [...(heads.get(line.partition) ?? []), line.offset]);
    }
    const field = `${PARKED_COMMAND_PREFIX}${op}:${key === undefined ? '*' : `k:${key}`}`;
    await Promise.all([...heads].map(([p, ids]) => client.hset(keys.recovery(group, p), field, JSON.stringify(ids))));
    return heads.size;
  }
}
