import { Inject, Injectable } from '@nestjs/common';
import { RebalanceSignal } from '../consumer/coordination/rebalance-signal';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import { EVENTRAIL_RETENTION, type AdminView } from './admin.types';
import { DEFAULT_STALE_GROUP_MS } from './group-facts.reader';
import { guardedProgress } from './guarded-progress';
import type { ArchiveObject, ArchiveSource, ProgressListener, RetentionRunResult } from './operations.types';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { RedisFullError } from '../errors/redis-full.error';
import type { DeadLetter } from '../wire/dead-letter.codec';
import { countToEnd } from '../consumer/coordination/lag';
import { isStreamId, offsetBeforeTime, previousStreamId, STREAM_START } from '../wire/stream-id';
import { EventrailRedis } from '../redis/eventrail-redis';
import type { NodeEvictionPolicy } from '../errors/eviction-policy.error';
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
  ParkedKey,
  ReadLogOptions,
  RetentionOperations,
} from './admin.types';
import { DeadLetterAdmin } from './dead-letters.admin';
import { ParkedAdmin } from './parked.admin';
import { GroupFactsReader, isStale } from './group-facts.reader';
import { GroupStatusReader } from './group-status.reader';
import { LogReader } from './log.reader';
import { LogStatsReader } from './log-stats.reader';
import { typeRefusals } from './permission-refusals';

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
  private readonly parked: ParkedAdmin;

  constructor(
    private readonly redis: EventrailRedis,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: AdminView,
    @Inject(EVENTRAIL_RETENTION) private readonly retention: RetentionOperations,
  ) {
    this.facts = new GroupFactsReader(redis);
    this.status = new GroupStatusReader(redis, this.facts);
    this.letters = new DeadLetterAdmin(redis, options);
    this.log = new LogReader(redis);
    this.rebalance = new RebalanceSignal(redis);
    this.logStats = new LogStatsReader(redis, options.prefix);
    this.parked = new ParkedAdmin(redis);
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

  /**
   * One group's status; `UnknownGroupError` if it never registered. `signal`
   * stops the reads (no lag page is read after it fired): the health check
   * bounds its own work with it.
   */
  async group(name: string, { signal }: { signal?: AbortSignal } = {}): Promise<GroupStatus> {
    await this.facts.assertExists(name);
    return this.status.read(name, { signal });
  }

  /** `maxmemory-policy` of every primary (read with `CONFIG GET`, else `INFO memory`); anything but `noeviction` can evict the log. */
  evictionPolicies(): Promise<NodeEvictionPolicy[]> {
    return this.redis.evictionPolicies();
  }

  /**
   * Moves a group's committed offsets to the start or end of the log, to an
   * entry id (that entry is handled next) or a time (the first entry at or
   * after it is handled next). Refuses while the group has live members unless
   * `force`, and then fences them: their leases are revoked (see
   * revoke-lease.lua), so none can commit over the reset; they take the
   * partitions again from the new offsets once their running handlers end.
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
        // An id or a time lands mid-log: counted once here, so its lag is O(1) afterwards (resetOffset-6.lua).
        const counted = typeof to === 'object' ? await countToEnd(client, keys.stream(partition), target) : undefined;
        await this.redis.scripts.resetOffset({ group, partition, to: target, counted });
      }
      // Running workers find their leases revoked now rather than at their next renewal.
      await this.rebalance.announce(group);
    }
    return { group, dryRun, partitions: changes };
  }

  /**
   * Removes groups whose members have all been gone longer than `staleMs`
   * (default: `retention.staleGroupMs`, else 24 h; judged on the Redis clock,
   * as retention judges it), with their offsets, leases and marks (dead
   * letters too), and returns their names. A group with a live member is
   * never removed: the rule is checked again in the same atomic step as the
   * delete (see `dropGroup`).
   */
  async pruneStaleGroups({ staleMs = this.options.retention?.staleGroupMs ?? DEFAULT_STALE_GROUP_MS }: { staleMs?: number } = {}): Promise<
    string[]
  > {
    if (!Number.isInteger(staleMs) || staleMs < 0) throw new InvalidOptionError('staleMs', staleMs, 'an integer number of milliseconds');
    const { now, groups } = await this.facts.readAll();
    const pruned: string[] = [];
    for (const facts of groups) {
      if (isStale(facts, staleMs, now) && (await this.dropGroup(facts.name, 'stale', staleMs)).dropped) pruned.push(facts.name);
    }
    return pruned;
  }

  /**
   * Deletes a group and everything it keeps in Redis. Refuses while it has
   * live members (checked in the same atomic step as the delete) unless
   * `force`, which fences them: their leases go, and they are told at once.
   */
  async deleteGroup(group: string, { force = false }: { force?: boolean } = {}): Promise<void> {
    await this.facts.assertExists(group);
    const { dropped, live } = await this.dropGroup(group, force ? 'force' : 'idle', 0);
    if (!dropped) throw new GroupHasLiveMembersError(group, live, 'delete');
    // Fenced workers find their leases gone now rather than at their next renewal.
    if (force) await this.rebalance.announce(group);
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
   * `newestFirst`); pass the last `id` as `after` for the next page. A page
   * stops at `count` letters or `maxBytes` (4 MiB by default), whichever
   * comes first, so it may be short while more follow: `deadLetterPage` says
   * where to go on.
   */
  async deadLetters(group: string, page: DeadLetterPage = {}): Promise<DeadLetter[]> {
    await this.facts.assertExists(group);
    return this.letters.list(group, page);
  }

  /** A page as `deadLetters` gives it, with `next`: the `after` of the next page, or null at the end. */
  async deadLetterPage(group: string, page: DeadLetterPage = {}): Promise<{ items: DeadLetter[]; next: string | null }> {
    await this.facts.assertExists(group);
    return this.letters.page(group, page);
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
   * The parked lines of a group (`ordering` `'key'` or `'unordered'`): per parked key its partition,
   * head, how many messages wait, attempts, first failure, next attempt and last error.
   */
  async parkedKeys(group: string): Promise<ParkedKey[]> {
    await this.facts.assertExists(group);
    return this.parked.list(group);
  }

  /**
   * Tries the parked lines of a group again now (every line, or the line of `key`), without waiting for
   * their next tier. The partition's owner does it when the signal reaches it (at once while it runs), or
   * when a worker next takes the partition. Resolves with how many partitions had a matching line.
   */
  async retryParked(group: string, { key }: { key?: string } = {}): Promise<number> {
    await this.facts.assertExists(group);
    if (key !== undefined && typeof key !== 'string') throw new InvalidOptionError('key', key, 'a string (the parked key)');
    const partitions = await this.parked.command(group, 'retry', key).catch((error: unknown) => {
      throw RedisFullError.from('retry parked lines', error);
    });
    if (partitions > 0) await this.rebalance.announce(group);
    return partitions;
  }

  /**
   * Dead-letters the head of `key`'s parked line now (reason `retries-exhausted`, the error says an
   * operator gave it up and carries the last failure); the next message of the key becomes the head and
   * is tried at once (with `ordering: 'unordered'`, where each parked message is a line of its own, every
   * parked message of the key is dead-lettered). Applied by the partition's owner as `retryParked` is.
   * Resolves with how many partitions had a line of that key.
   */
  async giveUpParked(group: string, { key }: { key: string }): Promise<number> {
    await this.facts.assertExists(group);
    if (typeof key !== 'string') throw new InvalidOptionError('key', key, 'a string (the parked key)');
    const partitions = await this.parked.command(group, 'give-up', key).catch((error: unknown) => {
      throw RedisFullError.from('give up a parked head', error);
    });
    if (partitions > 0) await this.rebalance.announce(group);
    return partitions;
  }

  /**
   * Appends dead letters back to the log for `group` alone (other groups skip
   * them), with their original event id, key and publish time, and removes
   * them from the dead-letter stream. Returns how many were replayed;
   * `onProgress` hears after each page (up to 500 dead letters and 4 MiB);
   * one that throws is logged and not called again, and the replay goes on.
   * Replays running at once append each dead letter once. A Redis over
   * `maxmemory` rejects it with `RedisFullError`, whose `done` is how many
   * letters were replayed (and left the dead-letter stream) before the refusal.
   */
  async replayDeadLetters(
    group: string,
    ids: readonly string[] | 'all',
    { onProgress }: { onProgress?: ProgressListener } = {},
  ): Promise<number> {
    await this.facts.assertExists(group);
    return this.letters.replay(group, ids, guardedProgress(onProgress, 'dead-letter replay'));
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

  /**
   * Deletes a group in two steps that a worker joining at any moment cannot
   * break. First, atomically in the group's hash tag (dropGroup-6.lua): check
   * there is no live member (and, `stale`, the last-seen time) on the Redis
   * clock, delete the group's own keys and bump its generation. A joining
   * worker's heartbeat runs before that (the check refuses) or after it (it
   * re-creates members and last-seen at the new generation). Then, per
   * partition (other hash tags, so separate scripts in one round trip), drop
   * the partition keys unless a worker of the new generation took them
   * (dropGroupPartition-4.lua); a partition left behind is cleared by the
   * next acquire instead (acquireLease-5.lua). Last the registry, which a
   * joined worker's heartbeat also writes: after removing the entry, a live
   * member found now puts it back (on a single Redis that settles it; on a
   * cluster, where the worker's commands may land in another order, its next
   * heartbeat does).
   */
  private async dropGroup(group: string, mode: 'stale' | 'idle' | 'force', staleMs: number): Promise<{ dropped: boolean; live: string[] }> {
    const { keys, client, scripts } = this.redis;
    const dropped = await scripts.dropGroup({ group, mode, staleMs });
    if (dropped.verdict !== 'dropped') return { dropped: false, live: dropped.verdict === 'live' ? dropped.members : [] };
    const { generation } = dropped;
    await Promise.all([
      ...Array.from({ length: keys.partitions }, (_, partition) => scripts.dropGroupPartition({ group, partition, generation })),
      client.srem(keys.groups, group),
    ]);
    if ((await this.liveMembers(group)).length > 0) await client.sadd(keys.groups, group);
    return { dropped: true, live: [] };
  }

  private async liveMembers(group: string): Promise<string[]> {
    const {
      groups: [facts],
    } = await this.facts.read([group]);
    return facts.members.map((m) => m.workerId);
  }
}

// A user without write permissions (a read-only dashboard or CLI user) gets RedisPermissionError from these.
typeRefusals(EventrailAdmin.prototype, {
  resetOffsets: 'reset offsets',
  pruneStaleGroups: 'prune stale groups',
  deleteGroup: 'delete a group',
  replayDeadLetters: 'replay dead letters',
  restoreArchive: 'restore an archive',
  runRetention: 'run retention',
  purgeDeadLetters: 'purge dead letters',
});
