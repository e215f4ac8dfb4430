import { Logger } from '@nestjs/common';
import { ArchiveFormatError } from '../errors/archive-format.error';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { readEntry } from '../wire/codec';
import { redeliver } from '../redelivery/redelivery';
import { compareStreamIds, isStreamId, MAX_SEQ } from '../wire/stream-id';
import type { EventrailRedis } from '../redis/eventrail-redis';
import { ArchivedEntry, decodeArchive, MAX_ARCHIVE_OBJECT_BYTES, parseArchiveName } from './archive/archive-file';
import type { ArchiveSink } from './archive/archive-sink';
import type { ArchiveObject, ArchiveSource, ProgressListener } from '../admin/operations.types';
import type { ResolvedTracingOptions } from '../tracing/tracing.options';

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
    /** Most bytes one object may inflate to (see `MAX_ARCHIVE_OBJECT_BYTES`). */
    private readonly maxObjectBytes = MAX_ARCHIVE_OBJECT_BYTES,
    /** OpenTelemetry spans for the restores (see `log/redelivery.ts`). */
    private readonly tracing?: ResolvedTracingOptions,
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

  /**
   * Every object is read and checked against its name before the first entry
   * is appended, so a bad one stops the restore with nothing appended (a
   * restore is not idempotent: a half-done one could not simply be run again).
   * Objects go in partition and id order; an entry an earlier object of this
   * call already restored is not appended again, so objects that overlap (a
   * crash between writing an object and moving the archive mark makes the next
   * cycle write an overlapping one) restore each entry once.
   */
  async restore(group: string, source: ArchiveSource, onProgress?: ProgressListener): Promise<number> {
    const { objects, from, to } = await this.select(source);
    // Progress counts each object twice: once checked, once appended.
    const steps = objects.length * 2;
    for (const [done, object] of objects.entries()) {
      await this.read(object);
      onProgress?.(done + 1, steps);
    }
    // Per partition, the last original id this call appended: objects come in id order, so anything at or before it is a repeat.
    const restoredUpTo = new Map<number, string>();
    let restored = 0;
    for (const [done, object] of objects.entries()) {
      const upTo = restoredUpTo.get(object.partition);
      const entries = (await this.read(object)).filter(
        (e) =>
          (upTo === undefined || compareStreamIds(e.id, upTo) > 0) &&
          (from === undefined || compareStreamIds(e.id, from) >= 0) &&
          (to === undefined || compareStreamIds(e.id, to) <= 0),
      );
      const count = await this.append(group, object, entries, restored);
      if (entries.length > 0) restoredUpTo.set(object.partition, entries[entries.length - 1].id);
      this.logger.log(`Restored ${count} entries of archive ${object.name} for group "${group}"`);
      restored += count;
      onProgress?.(objects.length + done + 1, steps);
    }
    return restored;
  }

  private async read(object: ArchiveObject): Promise<ArchivedEntry[]> {
    return decodeArchive(object, await this.sink.get(object.name), this.maxObjectBytes);
  }

  private async select(source: ArchiveSource): Promise<{ objects: ArchiveObject[]; from?: string; to?: string }> {
    if (typeof source === 'string' || Array.isArray(source)) {
      const names: readonly unknown[] = typeof source === 'string' ? [source] : source;
      const objects = names.map((name) => {
        const parsed = typeof name === 'string' ? parseArchiveName(name) : null;
        if (!parsed)
          throw new InvalidOptionError('source', name, 'an archive name such as "eventrail/p0/1700000000000-0_1700000000999-0.jsonl.gz"');
        return this.ofThisLog(parsed);
      });
      return { objects: inRestoreOrder(objects) };
    }
    if (source === null || typeof source !== 'object') {
      throw new InvalidOptionError('source', source, 'an archive name, a list of names, or { partition?, from?, to? }');
    }
    const range = source as { partition?: number; from?: string | Date; to?: string | Date };
    const from = rangeBound('source.from', range.from, '0');
    const to = rangeBound('source.to', range.to, MAX_SEQ);
    const objects = (await this.list(range.partition))
      .filter(
        (o) => (from === undefined || compareStreamIds(o.lastId, from) >= 0) && (to === undefined || compareStreamIds(o.firstId, to) <= 0),
      )
      .map((o) => this.ofThisLog({ ...o, prefix: this.redis.keys.prefix }));
    return { objects, from, to };
  }

  /** A named object belongs to this log: its prefix, one of its partitions. */
  private ofThisLog(object: ArchiveObject & { prefix: string }): ArchiveObject {
    const { prefix, partitions } = this.redis.keys;
    if (object.prefix !== prefix) {
      throw new ArchiveFormatError(object.name, 0, `it is an archive of the log "${object.prefix}", not of this log ("${prefix}")`);
    }
    if (object.partition >= partitions) {
      throw new ArchiveFormatError(object.name, 0, `partition ${object.partition} does not exist in this log (${partitions})`);
    }
    const { name, partition, firstId, lastId } = object;
    return { name, partition, firstId, lastId };
  }

  /** `entries` are all of `partition` (decodeArchive checked it): every page goes to one stream, so one cluster slot. */
  private async append(group: string, { name, partition }: ArchiveObject, entries: ArchivedEntry[], before: number): Promise<number> {
    const { client, keys } = this.redis;
    let appended = 0;
    for (let i = 0; i < entries.length; i += PAGE) {
      const origin = { partition, logTag: keys.logTag };
      const page = entries.slice(i, i + PAGE).map((e) => ({ partition, entry: readEntry(e.id, Object.entries(e.fields).flat(), origin) }));
      const failures = await redeliver(client, keys, group, page, this.tracing, 'restore');
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

/** By partition, then id, each name once: the order restore's repeat check relies on. */
function inRestoreOrder(objects: ArchiveObject[]): ArchiveObject[] {
  const unique = [...new Map(objects.map((o) => [o.name, o])).values()];
  return unique.sort((a, b) => a.partition - b.partition || compareStreamIds(a.firstId, b.firstId) || compareStreamIds(a.lastId, b.lastId));
}

function rangeBound(path: string, value: string | Date | undefined, seq: string): string | undefined {
  if (value === undefined) return undefined;
  if (value instanceof Date && !Number.isNaN(value.getTime())) return `${value.getTime()}-${seq}`;
  if (typeof value === 'string' && isStreamId(value)) return value;
  throw new InvalidOptionError(path, value, 'a stream id such as "1700000000000-0" or a valid Date');
}
