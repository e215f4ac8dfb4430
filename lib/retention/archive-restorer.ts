import { Logger } from '@nestjs/common';
import { ArchiveFormatError } from '../errors/archive-format.error';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { readEntry } from '../log/codec';
import { redeliver } from '../log/redelivery';
import { compareStreamIds, isStreamId, MAX_SEQ } from '../log/stream-id';
import type { EventrailRedis } from '../redis/eventrail-redis';
import { ArchivedEntry, decodeArchive, parseArchiveName } from './archive/archive-file';
import type { ArchiveSink } from './archive/archive-sink';
import type { ArchiveObject, ArchiveSource, ProgressListener } from '../eventrail.types';

const PAGE = 500;

/**
 * Reads archive objects back and appends their entries to the log for one
 * group: each keeps its fields (event id, key, publish time, data, headers)
 * and gets `to: <group>`, so the other groups skip it, as with a dead-letter
 * replay. The entry gets a new stream id at the end of its partition.
 */
export class ArchiveRestorer {
  private readonly logger = new Logger(ArchiveRestorer.name);

  constructor(
    private readonly redis: EventrailRedis,
    private readonly sink: ArchiveSink,
  ) {}

  /** Archive objects of this log (by its prefix), by partition and then id. */
  async list(partition?: number): Promise<ArchiveObject[]> {
    const { prefix, partitions } = this.redis.keys;
    if (partition !== undefined && !(Number.isInteger(partition) && partition >= 0 && partition < partitions)) {
      throw new InvalidOptionError('partition', partition, `a partition from 0 to ${partitions - 1}`);
    }
    const names = await this.sink.list(partition === undefined ? `${prefix}/` : `${prefix}/p${partition}/`);
    return names
      .map((name) => parseArchiveName(name))
      .filter((o): o is ArchiveObject & { prefix: string } => o !== null && o.prefix === prefix)
      .filter((o) => partition === undefined || o.partition === partition)
      .map(({ name, partition: p, firstId, lastId }) => ({ name, partition: p, firstId, lastId }))
      .sort((a, b) => a.partition - b.partition || compareStreamIds(a.firstId, b.firstId));
  }

  async restore(group: string, source: ArchiveSource, onProgress?: ProgressListener): Promise<number> {
    const { objects, from, to } = await this.select(source);
    let restored = 0;
    for (const [done, object] of objects.entries()) {
      const entries = (await decodeArchive(object.name, await this.sink.get(object.name))).filter(
        (e) => (from === undefined || compareStreamIds(e.id, from) >= 0) && (to === undefined || compareStreamIds(e.id, to) <= 0),
      );
      const count = await this.append(group, object, entries, restored);
      this.logger.log(`Restored ${count} entries of archive ${object.name} for group "${group}"`);
      restored += count;
      onProgress?.(done + 1, objects.length);
    }
    return restored;
  }

  private async select(source: ArchiveSource): Promise<{ objects: ArchiveObject[]; from?: string; to?: string }> {
    if (typeof source === 'string' || Array.isArray(source)) {
      const names: readonly unknown[] = typeof source === 'string' ? [source] : source;
      const objects = names.map((name) => {
        const parsed = typeof name === 'string' ? parseArchiveName(name) : null;
        if (!parsed)
          throw new InvalidOptionError('source', name, 'an archive name such as "eventrail/p0/1700000000000-0_1700000000999-0.jsonl.gz"');
        return parsed;
      });
      return { objects };
    }
    if (source === null || typeof source !== 'object') {
      throw new InvalidOptionError('source', source, 'an archive name, a list of names, or { partition?, from?, to? }');
    }
    const range = source as { partition?: number; from?: string | Date; to?: string | Date };
    const from = rangeBound('source.from', range.from, '0');
    const to = rangeBound('source.to', range.to, MAX_SEQ);
    const objects = (await this.list(range.partition)).filter(
      (o) => (from === undefined || compareStreamIds(o.lastId, from) >= 0) && (to === undefined || compareStreamIds(o.firstId, to) <= 0),
    );
    return { objects, from, to };
  }

  private async append(group: string, { name, partition }: ArchiveObject, entries: ArchivedEntry[], before: number): Promise<number> {
    const { client, keys } = this.redis;
    if (partition >= keys.partitions)
      throw new ArchiveFormatError(name, 0, `partition ${partition} does not exist in this log (${keys.partitions})`);
    // One partition per object: every page below goes to one stream, so one cluster slot.
    const stray = entries.find((e) => e.partition !== partition);
    if (stray)
      throw new ArchiveFormatError(name, 0, `entry ${stray.id} is of partition ${stray.partition}, not ${partition} as the name says`);
    let appended = 0;
    for (let i = 0; i < entries.length; i += PAGE) {
      const page = entries.slice(i, i + PAGE).map((e) => ({ partition, entry: readEntry(e.id, Object.entries(e.fields).flat()) }));
      const failures = await redeliver(client, keys, group, page);
      appended += failures.filter((failure) => failure === null).length;
      const failed = failures.find((failure) => failure !== null);
      if (failed) {
        throw new RedisUnavailableError(
          `restoring archive ${name} for group "${group}" (${before + appended} entries restored so far)`,
          failed,
        );
      }
    }
    return appended;
  }
}

function rangeBound(path: string, value: string | Date | undefined, seq: string): string | undefined {
  if (value === undefined) return undefined;
  if (value instanceof Date && !Number.isNaN(value.getTime())) return `${value.getTime()}-${seq}`;
  if (typeof value === 'string' && isStreamId(value)) return value;
  throw new InvalidOptionError(path, value, 'a stream id such as "1700000000000-0" or a valid Date');
}
