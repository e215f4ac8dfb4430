import { Inject, Injectable } from '@nestjs/common';
import { RebalanceSignal } from '../consumer/rebalance-signal';
import { DEFAULT_STALE_GROUP_MS, EVENTRAIL_OPTIONS, EVENTRAIL_RETENTION } from '../eventrail.constants';
import type { ResolvedEventrailOptions } from '../eventrail.options';
import type { ArchiveObject, ArchiveSource, ProgressListener, RetentionRunResult } from '../eventrail.types';
import { InvalidOptionError } from '../errors/invalid-option.error';
import type { DeadLetter } from '../log/dead-letter.codec';
import { isStreamId, offsetBeforeTime, previousStreamId, STREAM_START } from '../log/stream-id';
import { EventrailRedis } from '../redis/eventrail-redis';
import { GroupHasLiveMembersError } from '../errors/group-has-live-members.error';
import type {
  DashboardOverview,
  DeadLetterPage,
  FollowOptions,
  GroupStatus,
  LogEntry,
  LogPage,
  LogStats,
  NodeStatus,
  OffsetChange,
  OffsetResetResult,
  OffsetTarget,
  ReadLogOptions,
  RetentionOperations,
} from './admin.types';
import { DeadLetterAdmin } from './dead-letters.admin';
import { GroupFactsReader, isStale } from './group-facts.reader';
import { GroupStatusReader } from './group-status.reader';
import { LogReader } from './log.reader';
import { LogStatsReader } from './log-stats.reader';

/**
 * Operations on the log that the admin API, the dashboard and the CLI build
 * on: group status with lag, offsets, stale groups, log statistics, and dead
 * letters (list, replay to the group that dead-lettered them and only to it,
 * purge).
 */
@Injectable()
export class EventrailAdmin {
  private readonly facts: GroupFactsReader;
  private readonly status: GroupStatusReader;
  private readonly letters: DeadLetterAdmin;
  private readonly log: LogReader;
  private readonly rebalance: RebalanceSignal;
  private readonly logStats: LogStatsReader;

  constructor(
    private readonly redis: EventrailRedis,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: ResolvedEventrailOptions,
    @Inject(EVENTRAIL_RETENTION) private readonly retention: RetentionOperations,
  ) {
    this.facts = new GroupFactsReader(redis);
    this.status = new GroupStatusReader(redis, this.facts);
    this.letters = new DeadLetterAdmin(redis, options);
    this.log = new LogReader(redis);
    this.rebalance = new RebalanceSignal(redis);
    this.logStats = new LogStatsReader(redis, options.prefix);
  }

  /** Every registered group: events, live members, per partition committed offset, lag and lease owner, dead-letter count. */
  async groups(): Promise<GroupStatus[]> {
    const names = await this.facts.names();
    return Promise.all(names.map((name) => this.status.read(name)));
  }

  /**
   * Everything a front end shows first, in one call: connection and ping,
   * nodes, partition statistics with their sums, and every group's status.
   */
  async overview(): Promise<DashboardOverview> {
    const [pingMs, stats, nodes, groups] = await Promise.all([this.ping(), this.stats(), this.nodes(), this.groups()]);
    const length = stats.partitions.reduce((sum, p) => sum + p.length, 0);
    const added = stats.partitions.map((p) => p.entriesAdded);
    const entriesAdded = added.includes(null) ? null : (added as number[]).reduce((sum, n) => sum + n, 0);
    return {
      time: new Date(),
      prefix: stats.prefix,
      partitions: stats.partitions.length,
      redis: { status: this.connectionStatus(), pingMs, usedMemoryBytes: stats.usedMemoryBytes },
      nodes,
      log: { partitions: stats.partitions, length, entriesAdded },
      groups,
    };
  }

  /** One group's status; `UnknownGroupError` if it never registered. */
  async group(name: string): Promise<GroupStatus> {
    await this.facts.assertExists(name);
    return this.status.read(name);
  }

  /**
   * Moves a group's committed offsets to the start or end of the log, to an
   * entry id (that entry is handled next) or a time (the first entry at or
   * after it is handled next). Refuses while the group has live members unless
   * `force`, and then fences them: their leases are removed, so none can commit
   * over the reset; they take the partitions again from the new offsets.
   * Idempotency marks of the group are cleared, so the entries are handled
   * again. `dryRun` reports the changes without making them.
   */
  async resetOffsets(
    group: string,
    to: OffsetTarget,
    { dryRun = false, force = false }: { dryRun?: boolean; force?: boolean } = {},
  ): Promise<OffsetResetResult> {
    await this.facts.assertExists(group);
    const { keys, client } = this.redis;
    const live = await this.liveMembers(group);
    if (live.length > 0 && !force && !dryRun) throw new GroupHasLiveMembersError(group, live, 'reset the offsets');
    const changes: OffsetChange[] = [];
    for (let p = 0; p < keys.partitions; p++) {
      const [from, target] = await Promise.all([client.get(keys.offset(group, p)), this.offsetFor(p, to)]);
      changes.push({ partition: p, from, to: target });
    }
    if (!dryRun) {
      for (const { partition, to: target } of changes) {
        await client.eventrailResetOffset(
          keys.lease(group, partition),
          keys.offset(group, partition),
          keys.epoch(group, partition),
          keys.recovery(group, partition),
          keys.done(group, partition),
          target,
        );
      }
      // Running workers find their leases gone now rather than at their next renewal.
      await this.rebalance.announce(group);
    }
    return { group, dryRun, partitions: changes };
  }

  /**
   * Removes groups whose members have all been gone longer than `staleMs`
   * (default: `retention.staleGroupMs`, else 24 h; judged on the Redis clock,
   * as retention judges it), with their offsets, leases and marks (dead
   * letters too), and returns their names. A group with a live member is
   * never removed.
   */
  async pruneStaleGroups({ staleMs = this.options.retention?.staleGroupMs ?? DEFAULT_STALE_GROUP_MS }: { staleMs?: number } = {}): Promise<
    string[]
  > {
    if (!Number.isInteger(staleMs) || staleMs < 0) throw new InvalidOptionError('staleMs', staleMs, 'an integer number of milliseconds');
    const { now, groups } = await this.facts.readAll();
    const stale = groups.filter((facts) => isStale(facts, staleMs, now)).map((facts) => facts.name);
    for (const group of stale) await this.removeGroup(group);
    return stale;
  }

  /** Deletes a group and everything it keeps in Redis. Refuses while it has live members unless `force`. */
  async deleteGroup(group: string, { force = false }: { force?: boolean } = {}): Promise<void> {
    await this.facts.assertExists(group);
    const live = await this.liveMembers(group);
    if (live.length > 0 && !force) throw new GroupHasLiveMembersError(group, live, 'delete');
    await this.removeGroup(group);
  }

  /** Round trip of a PING in milliseconds; rejects when Redis does not answer. */
  async ping(): Promise<number> {
    const started = performance.now();
    await this.redis.client.ping();
    return performance.now() - started;
  }

  /** The connection's state: `ready` when usable, else ioredis's status (`connecting`, `reconnecting`, `end`, ...). */
  connectionStatus(): string {
    return this.redis.client.status;
  }

  /**
   * Which Redis primary holds which partitions. On Redis Cluster, from
   * `CLUSTER SLOTS` and each partition's key slot; on a single Redis, one node
   * with every partition.
   */
  async nodes(): Promise<NodeStatus[]> {
    return this.logStats.nodes();
  }

  /** Length, first/last id and entries ever added of every partition, and Redis memory when INFO is allowed. */
  async stats(): Promise<LogStats> {
    return this.logStats.stats();
  }

  /**
   * A page of a group's dead letters, oldest first (newest first with
   * `newestFirst`); pass the last `id` as `after` for the next page.
   */
  async deadLetters(group: string, page: DeadLetterPage = {}): Promise<DeadLetter[]> {
    await this.facts.assertExists(group);
    return this.letters.list(group, page);
  }

  /** One dead letter of a group by its id, or null when there is none (replayed, purged or never existed). */
  async deadLetter(group: string, id: string): Promise<DeadLetter | null> {
    await this.facts.assertExists(group);
    return this.letters.get(group, id);
  }

  /** How many dead letters a group has. */
  async deadLetterCount(group: string): Promise<number> {
    await this.facts.assertExists(group);
    return this.letters.count(group);
  }

  /**
   * Appends dead letters back to the log for `group` alone (other groups skip
   * them), with their original event id, key and publish time, and removes
   * them from the dead-letter stream. Returns how many were replayed;
   * `onProgress` hears after each page of 500.
   */
  async replayDeadLetters(
    group: string,
    ids: readonly string[] | 'all',
    { onProgress }: { onProgress?: ProgressListener } = {},
  ): Promise<number> {
    await this.facts.assertExists(group);
    return this.letters.replay(group, ids, onProgress);
  }

  /**
   * Appends archived entries (see `retention.archive`) back to the log for `group` alone: the other groups
   * skip them. They keep their event id, key and publish time. Returns how many were appended;
   * `onProgress` hears after each archive object.
   */
  restoreArchive(group: string, source: ArchiveSource, options: { onProgress?: ProgressListener } = {}): Promise<number> {
    return this.retention.restoreArchive(group, source, options);
  }

  /** Archive objects written for this log (needs `retention.archive`), optionally of one partition. */
  listArchives(options: { partition?: number } = {}): Promise<ArchiveObject[]> {
    return this.retention.listArchives(options);
  }

  /**
   * Runs one retention cycle now (needs the `retention` option; `enabled: false`
   * is enough, no scheduler is involved). `onProgress` hears after each partition.
   */
  runRetention(options: { onProgress?: ProgressListener } = {}): Promise<RetentionRunResult> {
    return this.retention.runOnce(options);
  }

  /**
   * A page of one partition of the log from a stream id or a time, optionally
   * of some event types only. Pass `next` as `after` for the next page.
   */
  readLog(partition: number, options: ReadLogOptions = {}): Promise<LogPage> {
    return this.log.read(partition, options);
  }

  /** One entry of the log by partition and stream id, or null when there is none (trimmed or never existed). */
  logEntry(partition: number, offset: string): Promise<LogEntry | null> {
    return this.log.entry(partition, offset);
  }

  /**
   * Entries appended to any partition from now on, as they come, until
   * `signal` aborts or the loop breaks (which stops it at once). Waits in
   * `XREAD BLOCK` on connections of its own: idle, it sends one read per 10 s.
   */
  follow(options: FollowOptions = {}): AsyncIterableIterator<LogEntry> {
    return this.log.follow(options);
  }

  /** Deletes every dead letter of a group; returns how many there were. */
  async purgeDeadLetters(group: string): Promise<number> {
    await this.facts.assertExists(group);
    return this.letters.purge(group);
  }

  /** The committed offset that makes `to` the next entry handled in a partition. */
  private async offsetFor(partition: number, to: OffsetTarget): Promise<string> {
    if (to === 'start') return STREAM_START;
    if (to === 'end') {
      const last = await this.redis.client.xrevrange(this.redis.keys.stream(partition), '+', '-', 'COUNT', 1);
      return last[0]?.[0] ?? STREAM_START;
    }
    if (typeof to === 'object' && to !== null && 'id' in to && typeof to.id === 'string' && isStreamId(to.id))
      return previousStreamId(to.id);
    if (typeof to === 'object' && to !== null && 'time' in to && to.time instanceof Date && !Number.isNaN(to.time.getTime()))
      return offsetBeforeTime(to.time);
    throw new InvalidOptionError('to', to, "'start', 'end', { id: '<ms>-<seq>' } or { time: Date }");
  }

  private async removeGroup(group: string): Promise<void> {
    const { keys, client } = this.redis;
    // One key per command: the keys live in different cluster slots.
    await Promise.all([...keys.groupKeys(group).map((key) => client.del(key)), client.srem(keys.groups, group)]);
  }

  private async liveMembers(group: string): Promise<string[]> {
    const {
      groups: [facts],
    } = await this.facts.read([group]);
    return facts.members.map((m) => m.workerId);
  }
}
