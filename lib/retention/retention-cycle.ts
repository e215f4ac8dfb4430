import { Logger } from '@nestjs/common';
import type { EventrailRedis } from '../redis/eventrail-redis';
import { archiveName, encodeArchive } from './archive/archive-file';
import type { ArchiveSink } from './archive/archive-sink';
import { GroupFacts, GroupFactsReader, isStale } from '../admin/group-facts.reader';
import { OLD_REDIS_HINT, type RetentionLock } from './retention-lock';
import { RedisFullError } from '../errors/redis-full.error';
import { RETENTION_DEFAULTS, ResolvedRetentionOptions } from './retention.options';
import type { ArchivedRange, PartitionRetentionResult, ProgressListener, RetentionRunResult } from '../admin/operations.types';
import { nextStreamId } from '../wire/stream-id';
import { capAtArchiveMarks, capMinId, minIdForAge, requestedMinId } from './trim-point';
import { describeError } from '../util/describe-error';
import { redactUrlsIn } from '../util/redact-url';

const UNARCHIVED_HINT =
  'this instance has no archive; configure retention.archive as the archiving instance does, or set ' +
  'retention.allowUnarchivedTrim (RETENTION_ALLOW_UNARCHIVED_TRIM, --allow-unarchived-trim) to trim them unarchived';

/** Entries read per round trip while looking for the `maxLen` boundary (they carry their payloads). */
const PAGE = 200;

/**
 * One retention pass over the log, run under the retention lock: per
 * partition, the MINID the policy asks for, capped by the committed offsets of
 * live groups; the entries below it archived (when a sink is configured) and
 * only then trimmed; then the dead-letter streams.
 */
export class RetentionCycle {
  private readonly logger = new Logger(RetentionCycle.name);
  /** Stale groups already warned about by this process, so the warning is not repeated every cycle. */
  private readonly reportedStale = new Set<string>();
  /** Partitions already warned about for holding back unarchived entries, so the warning is not repeated every cycle. */
  private readonly reportedUnarchived = new Set<number>();

  constructor(
    private readonly redis: EventrailRedis,
    private readonly facts: GroupFactsReader,
    private readonly options: ResolvedRetentionOptions,
    private readonly sink: ArchiveSink | undefined,
  ) {}

  async run(lock: RetentionLock, stopping: () => boolean, onProgress?: ProgressListener): Promise<Omit<RetentionRunResult, 'ran'>> {
    const { now, groups } = await this.facts.readAll();
    const stale = (g: GroupFacts): boolean => isStale(g, this.options.staleGroupMs, now);
    const staleGroups = groups.filter(stale).map((g) => g.name);
    this.reportStale(staleGroups);
    const live = groups.filter((g) => !stale(g));
    const partitions: PartitionRetentionResult[] = [];
    for (let p = 0; p < this.redis.keys.partitions && !stopping(); p++) {
      partitions.push(await this.partition(p, now, live, lock));
      onProgress?.(p + 1, this.redis.keys.partitions);
      if (!(await lock.extend())) {
        this.logger.warn(`Retention lock expired during the cycle (after partition ${p}); leaving the rest to the next cycle`);
        break;
      }
    }
    const deadLetters = stopping() ? [] : await this.trimDeadLetters(groups.map((g) => g.name));
    return { staleGroups, partitions, deadLetters };
  }

  private async partition(partition: number, now: number, live: GroupFacts[], lock: RetentionLock): Promise<PartitionRetentionResult> {
    const { client, keys } = this.redis;
    const { maxAgeMs, maxLen } = this.options;
    const stream = keys.stream(partition);
    const requested = requestedMinId([
      maxAgeMs === undefined ? null : minIdForAge(now, maxAgeMs),
      maxLen === undefined ? null : await this.minIdForLength(stream, maxLen),
    ]);
    const { minId, heldBackBy } = capMinId(
      requested,
      live.map((g) => ({ group: g.name, committed: g.committed[partition], parkedFloor: g.parkedFloor[partition] })),
    );
    const result: PartitionRetentionResult = { partition, requestedMinId: requested, minId, heldBackBy, archived: [], trimmed: 0 };
    if (heldBackBy.length > 0) {
      this.logger.debug(`Retention: partition ${partition}: groups ${heldBackBy.join(', ')} hold the trim below ${requested}`);
    }
    const firstBelow = minId === null ? [] : await client.xrange(stream, '-', `(${minId}`, 'COUNT', 1);
    if (minId === null || firstBelow.length === 0) return result;
    if (!this.sink && !this.options.allowUnarchivedTrim) {
      const held = await this.holdAtArchiveMarks(partition, minId);
      if (held) {
        result.minId = held.minId;
        result.error = held.reason;
      }
    }

    if (this.sink) {
      try {
        result.archived = await this.archive(partition, minId, this.sink, lock);
      } catch (error) {
        // The sink id names an S3 endpoint, which may carry user info; the SDK's message may quote it.
        result.error = redactUrlsIn(`archive to ${this.sink.id} failed: ${describeError(error)}`);
        this.logger.error(`Retention: partition ${partition}: ${result.error}; nothing trimmed (entries below ${minId} are kept)`);
        return result;
      }
    }
    const trimTo = result.minId as string;
    const trimmed = await this.redis.scripts.trimLog({
      partition,
      minId: trimTo,
      approximate: this.options.approximate,
      sinkId: this.sink?.id ?? '',
      allowUnarchived: this.options.allowUnarchivedTrim === true,
    });
    if (trimmed < 0) {
      // -2: an archiving instance wrote a mark after holdAtArchiveMarks read them (or they moved back).
      result.error =
        trimmed === -1
          ? redactUrlsIn(`entries below ${trimTo} are not all archived to ${this.sink?.id}`)
          : `entries below ${trimTo} are not all archived, and this log is archived: ${UNARCHIVED_HINT}`;
      this.logger.error(`Retention: partition ${partition}: ${result.error}; nothing trimmed`);
      return result;
    }
    result.trimmed = trimmed;
    if (trimmed > 0) await this.reanchorPositions(partition, live, firstBelow[0][0]);
    if (trimmed > 0) {
      const held = heldBackBy.length > 0 ? ` (held back by ${heldBackBy.join(', ')})` : '';
      this.logger.log(`Retention: partition ${partition}: trimmed ${trimmed} entries below ${trimTo}${held}`);
    }
    return result;
  }

  /**
   * The trim removed only entries every live group had committed, so their
   * lag positions still hold: their anchors move up to the new first entry
   * (reanchorPosition-2.lua), or readers would count the lag of a group the
   * trim reached until it caught up. One command per group, sent together; a
   * failure only costs that (lag is counted then).
   */
  private async reanchorPositions(partition: number, live: GroupFacts[], firstBeforeTrim: string): Promise<void> {
    await Promise.all(
      live.map((g) =>
        this.redis.scripts.reanchorPosition({ group: g.name, partition, firstBeforeTrim }).catch((error: unknown) => {
          this.logger.debug(`Retention: partition ${partition}: lag position of group ${g.name} kept its anchor (${describeError(error)})`);
        }),
      ),
    );
  }

  /**
   * Without an archive of its own, a cycle must not trim what the fleet's archive has not saved yet: on a
   * partition with archive marks, the MINID is capped at the highest one (trimLog-3 refuses anything past
   * it, this only finds out how far it may go and says why). Undefined when nothing is held back.
   */
  private async holdAtArchiveMarks(partition: number, minId: string): Promise<{ minId: string; reason: string } | undefined> {
    const { client, keys } = this.redis;
    const marks = await client.hgetall(keys.archived(partition));
    const cap = capAtArchiveMarks(minId, Object.values(marks));
    if (!cap.capped) {
      this.reportedUnarchived.delete(partition);
      return undefined;
    }
    const sinks = redactUrlsIn(Object.keys(marks).sort().join(', '));
    const reason = `entries from ${cap.minId} on are not archived (this log is archived to ${sinks}); kept: ${UNARCHIVED_HINT}`;
    if (!this.reportedUnarchived.has(partition)) {
      this.reportedUnarchived.add(partition);
      this.logger.warn(`Retention: partition ${partition}: ${reason}`);
    }
    return { minId: cap.minId, reason };
  }

  /** The MINID that keeps the newest `maxLen` entries, or null when the partition is not longer than that. */
  private async minIdForLength(stream: string, maxLen: number): Promise<string | null> {
    const { client } = this.redis;
    const length = await client.xlen(stream);
    if (length <= maxLen) return null;
    if (maxLen === 0) {
      const last = await client.xrevrange(stream, '+', '-', 'COUNT', 1);
      return last.length > 0 ? nextStreamId(last[0][0]) : null;
    }
    // The oldest entry kept is the maxLen-th from the end, or the (length - maxLen + 1)-th from the start:
    // read from the nearer end.
    const excess = length - maxLen;
    return maxLen <= excess ? this.nthId(stream, 'newest', maxLen - 1) : this.nthId(stream, 'oldest', excess);
  }

  /** Id of the entry `index` places from one end (0 is the end itself), or null when the stream is shorter. */
  private async nthId(stream: string, from: 'oldest' | 'newest', index: number): Promise<string | null> {
    const { client } = this.redis;
    let cursor = from === 'oldest' ? '-' : '+';
    let left = index;
    for (;;) {
      const count = Math.min(PAGE, left + 1);
      const page =
        from === 'oldest'
          ? await client.xrange(stream, cursor, '+', 'COUNT', count)
          : await client.xrevrange(stream, cursor, '-', 'COUNT', count);
      if (left < page.length) return page[left][0];
      if (page.length < count) return null;
      left -= page.length;
      cursor = `(${page[page.length - 1][0]}`;
    }
  }

  /**
   * Archives the entries below `minId` that the sink does not have yet (after
   * its mark), in objects of at most `maxEntriesPerObject`, advancing the mark
   * after each verified object. Throws on the first failure.
   */
  private async archive(partition: number, minId: string, sink: ArchiveSink, lock: RetentionLock): Promise<ArchivedRange[]> {
    const { client, keys } = this.redis;
    const limit = this.options.archive?.maxEntriesPerObject ?? RETENTION_DEFAULTS.maxEntriesPerObject;
    const stream = keys.stream(partition);
    const mark = await client.hget(keys.archived(partition), sink.id);
    let start = mark ? `(${mark}` : '-';
    const archived: ArchivedRange[] = [];
    for (;;) {
      const entries = await client.xrange(stream, start, `(${minId}`, 'COUNT', limit);
      if (entries.length === 0) return archived;
      const firstId = entries[0][0];
      const lastId = entries[entries.length - 1][0];
      const name = archiveName(keys.prefix, partition, firstId, lastId);
      await sink.put(name, await encodeArchive(partition, entries));
      await this.markArchived(partition, sink.id, lastId);
      archived.push({ name, partition, firstId, lastId, count: entries.length });
      this.logger.debug(`Retention: partition ${partition}: archived ${entries.length} entries to ${name}`);
      if (entries.length < limit) return archived;
      if (!(await lock.extend())) throw new Error('the retention lock expired while archiving');
      start = `(${lastId}`;
    }
  }

  /**
   * Records how far `sinkId` has archived `partition`. A full Redis refuses
   * the `HSET`; the mark is what lets the trim that frees memory run
   * (trimLog-3.lua), so it is written then by a script that may write anyway.
   */
  private async markArchived(partition: number, sinkId: string, lastId: string): Promise<void> {
    const { client, keys, scripts } = this.redis;
    await client.hset(keys.archived(partition), sinkId, lastId).catch((error: unknown) => {
      if (!RedisFullError.isOutOfMemory(error)) throw error;
      return scripts.markArchivedWhenFull({ partition, sinkId, lastId }).catch((refused: unknown) => {
        throw new RedisFullError('record an archive mark', describeError(refused), OLD_REDIS_HINT);
      });
    });
  }

  private async trimDeadLetters(groups: string[]): Promise<Array<{ group: string; trimmed: number }>> {
    const maxLen = this.options.deadLetterMaxLen;
    if (maxLen === undefined || groups.length === 0) return [];
    const { client, keys } = this.redis;
    // One command per group, sent together: the streams live in different cluster slots.
    const trim = (key: string): Promise<number> =>
      this.options.approximate ? client.xtrim(key, 'MAXLEN', '~', maxLen) : client.xtrim(key, 'MAXLEN', '=', maxLen);
    const counts = await Promise.all(
      groups.map((group) =>
        trim(keys.deadLetters(group)).catch((error: unknown) => {
          this.logger.warn(`Retention: dead letters of group "${group}" could not be trimmed (${describeError(error)})`);
          return 0;
        }),
      ),
    );
    const trimmed = groups.map((group, i) => ({ group, trimmed: counts[i] })).filter((t) => t.trimmed > 0);
    if (trimmed.length > 0) {
      this.logger.log(
        `Retention: trimmed dead letters to ${maxLen} per group: ${trimmed.map((t) => `${t.group} -${t.trimmed}`).join(', ')}`,
      );
    }
    return trimmed;
  }

  private reportStale(stale: string[]): void {
    const fresh = stale.filter((group) => !this.reportedStale.has(group));
    for (const group of [...this.reportedStale]) if (!stale.includes(group)) this.reportedStale.delete(group);
    if (fresh.length === 0) return;
    for (const group of fresh) this.reportedStale.add(group);
    const names = fresh.map((g) => `"${g}"`).join(', ');
    this.logger.warn(
      `Retention: group${fresh.length > 1 ? 's' : ''} ${names} ha${fresh.length > 1 ? 've' : 's'} had no live member for more than ` +
        `staleGroupMs (${this.options.staleGroupMs} ms) and no longer hold${fresh.length > 1 ? '' : 's'} the log back: entries ` +
        'they have not committed may be trimmed. Remove them with EventrailAdmin.pruneStaleGroups() if they are gone for good.',
    );
  }
}
