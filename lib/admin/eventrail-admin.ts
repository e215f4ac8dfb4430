import { Inject, Injectable } from '@nestjs/common';
import { DEFAULT_STALE_GROUP_MS, EVENTRAIL_OPTIONS } from '../eventrail.constants';
import type { ResolvedEventrailOptions } from '../eventrail.options';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { UnknownGroupError } from '../errors/unknown-group.error';
import { FIELD } from '../log/codec';
import { DeadLetter, decodeDeadLetter } from '../log/dead-letter.codec';
import { partitionForKey } from '../log/partitioner';
import { offsetBeforeTime, previousStreamId, STREAM_START } from '../log/stream-id';
import { EventrailRedis } from '../redis/eventrail-redis';
import { EventrailRetention } from '../retention/eventrail-retention';
import type { ArchiveSource } from '../retention/retention.types';
import { GroupHasLiveMembersError } from '../errors/group-has-live-members.error';
import type { GroupStatus, LogStats, NodeStatus, OffsetChange, OffsetResetResult, OffsetTarget, PartitionLogStats } from './admin.types';
import { GroupStatusReader } from './group-status.reader';

const PAGE = 500;
const STREAM_ID = /^\d{1,20}-\d{1,20}$/;
/** Fields of the original entry kept in a dead letter, re-appended as they were on replay. */
const ORIGINAL_FIELDS = new Set<string>([FIELD.id, FIELD.event, FIELD.key, FIELD.time, FIELD.data, FIELD.headers]);

/**
 * Operations on the log that the admin API, the dashboard and the CLI build
 * on: group status with lag, offsets, stale groups, log statistics, and dead
 * letters (list, replay to the group that dead-lettered them and only to it,
 * purge).
 */
@Injectable()
export class EventrailAdmin {
  private readonly status: GroupStatusReader;

  constructor(
    private readonly redis: EventrailRedis,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: ResolvedEventrailOptions,
    private readonly retention: EventrailRetention,
  ) {
    this.status = new GroupStatusReader(redis);
  }

  /** Every registered group: events, live members, per partition committed offset, lag and lease owner, dead-letter count. */
  async groups(): Promise<GroupStatus[]> {
    const names = (await this.redis.client.smembers(this.redis.keys.groups)).sort();
    return Promise.all(names.map((name) => this.status.read(name)));
  }

  /** One group's status; `UnknownGroupError` if it never registered. */
  async group(name: string): Promise<GroupStatus> {
    await this.assertGroup(name);
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
    await this.assertGroup(group);
    const { keys, client } = this.redis;
    const live = (await this.status.read(group)).members.map((m) => m.workerId);
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
      await client.publish(keys.rebalanceChannel, group);
    }
    return { group, dryRun, partitions: changes };
  }

  /**
   * Removes groups whose members have all been gone longer than `staleMs`
   * (default: `retention.staleGroupMs`, else 24 h), with
   * their offsets, leases and marks (dead letters too), and returns their names.
   * A group with a live member is never removed.
   */
  async pruneStaleGroups({ staleMs = this.options.retention?.staleGroupMs ?? DEFAULT_STALE_GROUP_MS }: { staleMs?: number } = {}): Promise<
    string[]
  > {
    if (!Number.isInteger(staleMs) || staleMs < 0) throw new InvalidOptionError('staleMs', staleMs, 'an integer number of milliseconds');
    const now = Date.now();
    const pruned: string[] = [];
    for (const status of await this.groups()) {
      const lastSeen = status.lastSeen?.getTime() ?? 0;
      if (status.members.length > 0 || now - lastSeen <= staleMs) continue;
      await this.removeGroup(status.name);
      pruned.push(status.name);
    }
    return pruned;
  }

  /** Deletes a group and everything it keeps in Redis. Refuses while it has live members unless `force`. */
  async deleteGroup(group: string, { force = false }: { force?: boolean } = {}): Promise<void> {
    await this.assertGroup(group);
    const live = (await this.status.read(group)).members.map((m) => m.workerId);
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
    const { client, keys } = this.redis;
    const all = keys.streams.map((_, p) => p);
    if (!this.redis.isCluster) {
      const { host, port } = (client as unknown as { options: { host?: string; port?: number } }).options;
      return [{ node: `${host ?? 'localhost'}:${port ?? 6379}`, replicas: [], slots: [[0, 16383]], partitions: all }];
    }
    type SlotRange = [number, number, [string, number, ...unknown[]], ...Array<[string, number, ...unknown[]]>];
    const [ranges, partitionSlots] = await Promise.all([
      client.cluster('SLOTS') as unknown as Promise<SlotRange[]>,
      Promise.all(keys.streams.map((stream) => client.cluster('KEYSLOT', stream) as unknown as Promise<number>)),
    ]);
    const nodes = new Map<string, NodeStatus>();
    for (const [from, to, [host, port], ...replicas] of ranges) {
      const name = `${host}:${port}`;
      const node = nodes.get(name) ?? { node: name, replicas: [], slots: [], partitions: [] };
      node.slots.push([from, to]);
      for (const [replicaHost, replicaPort] of replicas) {
        const replica = `${replicaHost}:${replicaPort}`;
        if (!node.replicas.includes(replica)) node.replicas.push(replica);
      }
      node.partitions.push(...all.filter((p) => partitionSlots[p] >= from && partitionSlots[p] <= to));
      nodes.set(name, node);
    }
    return [...nodes.values()]
      .map((n) => ({ ...n, partitions: n.partitions.sort((a, b) => a - b) }))
      .sort((a, b) => a.node.localeCompare(b.node));
  }

  /** Length and first/last id of every partition, and Redis memory when INFO is allowed. */
  async stats(): Promise<LogStats> {
    const { keys, client } = this.redis;
    const partitions: PartitionLogStats[] = await Promise.all(
      keys.streams.map(async (stream, partition) => {
        const [length, first, last] = await Promise.all([
          client.xlen(stream),
          client.xrange(stream, '-', '+', 'COUNT', 1),
          client.xrevrange(stream, '+', '-', 'COUNT', 1),
        ]);
        return { partition, length, firstId: first[0]?.[0] ?? null, lastId: last[0]?.[0] ?? null };
      }),
    );
    const usedMemoryBytes = await client.info('memory').then(
      (info) => Number(/used_memory:(\d+)/.exec(info)?.[1] ?? NaN) || null,
      () => null, // INFO disabled
    );
    return { prefix: this.options.prefix, partitions, usedMemoryBytes };
  }

  /** A page of a group's dead letters, oldest first; pass the last `id` as `after` for the next page. */
  async deadLetters(group: string, { count = 100, after }: { count?: number; after?: string } = {}): Promise<DeadLetter[]> {
    await this.assertGroup(group);
    if (!Number.isInteger(count) || count < 1 || count > 10_000) throw new InvalidOptionError('count', count, 'an integer from 1 to 10000');
    if (after !== undefined && !STREAM_ID.test(after))
      throw new InvalidOptionError('after', after, 'a dead-letter id such as "1700000000000-0"');
    const entries = await this.redis.client.xrange(this.redis.keys.deadLetters(group), after ? `(${after}` : '-', '+', 'COUNT', count);
    return entries.map(([id, fields]) => decodeDeadLetter(id, fields));
  }

  /**
   * Appends dead letters back to the log for `group` alone (other groups skip
   * them), with their original event id, key and publish time, and removes
   * them from the dead-letter stream. Returns how many were replayed.
   */
  async replayDeadLetters(group: string, ids: readonly string[] | 'all'): Promise<number> {
    await this.assertGroup(group);
    if (ids !== 'all') {
      if (!Array.isArray(ids)) throw new InvalidOptionError('ids', ids, "an array of dead-letter ids or 'all'");
      for (const id of ids)
        if (typeof id !== 'string' || !STREAM_ID.test(id))
          throw new InvalidOptionError('ids', id, 'dead-letter ids such as "1700000000000-0"');
      let replayed = 0;
      for (let i = 0; i < ids.length; i += PAGE) replayed += await this.replayPage(group, await this.fetch(group, ids.slice(i, i + PAGE)));
      return replayed;
    }
    let replayed = 0;
    // Up to the last dead letter now: a replay that fails again is dead-lettered anew, after it,
    // and must not be picked up by this same call (it would replay in a loop).
    const key = this.redis.keys.deadLetters(group);
    const [last] = await this.redis.client.xrevrange(key, '+', '-', 'COUNT', 1);
    if (!last) return 0;
    let after = '-';
    for (;;) {
      const page = await this.redis.client.xrange(key, after, last[0], 'COUNT', PAGE);
      if (page.length === 0) return replayed;
      replayed += await this.replayPage(group, page);
      after = `(${page[page.length - 1][0]}`;
    }
  }

  /**
   * Appends archived entries (see `retention.archive`) back to the log for `group` alone: the other groups
   * skip them. They keep their event id, key and publish time. Returns how many were appended.
   */
  restoreArchive(group: string, source: ArchiveSource): Promise<number> {
    return this.retention.restoreArchive(group, source);
  }

  /** Deletes every dead letter of a group; returns how many there were. */
  async purgeDeadLetters(group: string): Promise<number> {
    await this.assertGroup(group);
    const key = this.redis.keys.deadLetters(group);
    const replies = await this.redis.client.multi().xlen(key).del(key).exec();
    return Number(replies?.[0]?.[1] ?? 0);
  }

  private async fetch(group: string, ids: readonly string[]): Promise<Array<[string, string[]]>> {
    const key = this.redis.keys.deadLetters(group);
    const pipeline = this.redis.client.pipeline();
    for (const id of ids) pipeline.xrange(key, id, id);
    const replies = (await pipeline.exec()) ?? [];
    return replies.flatMap(([error, entries]) => (error ? [] : (entries as Array<[string, string[]]>)));
  }

  private async replayPage(group: string, page: Array<[string, string[]]>): Promise<number> {
    if (page.length === 0) return 0;
    const { keys, client } = this.redis;
    const pipeline = client.pipeline();
    for (const [, fields] of page) {
      const { partition, original } = this.replayFields(fields);
      pipeline.xadd(keys.stream(partition), '*', ...original, FIELD.to, group);
    }
    const replies = (await pipeline.exec()) ?? [];
    // Only what was appended leaves the dead-letter stream.
    const appended = page.filter((_, i) => !replies[i]?.[0]).map(([id]) => id);
    if (appended.length > 0) await client.xdel(keys.deadLetters(group), ...appended);
    return appended.length;
  }

  private replayFields(fields: string[]): { partition: number; original: string[] } {
    const original: string[] = [];
    let key: string | undefined;
    let partition = 0;
    let raw: string | undefined;
    for (let i = 0; i + 1 < fields.length; i += 2) {
      const [name, value] = [fields[i], fields[i + 1]];
      if (ORIGINAL_FIELDS.has(name)) original.push(name, value);
      if (name === FIELD.key) key = value;
      if (name === 'partition') partition = Number(value);
      if (name === 'raw') raw = value;
    }
    // A malformed entry goes back exactly as it came (and will be dead-lettered again unless fixed at the source).
    if (raw !== undefined) {
      const rawFields = JSON.parse(raw) as string[];
      for (let i = 0; i + 1 < rawFields.length; i += 2) if (rawFields[i] !== FIELD.to) original.push(rawFields[i], rawFields[i + 1]);
    }
    const partitions = this.options.partitions;
    if (key !== undefined) partition = partitionForKey(key, partitions);
    else if (!(partition >= 0 && partition < partitions)) partition = 0;
    return { partition, original };
  }

  /** The committed offset that makes `to` the next entry handled in a partition. */
  private async offsetFor(partition: number, to: OffsetTarget): Promise<string> {
    if (to === 'start') return STREAM_START;
    if (to === 'end') {
      const last = await this.redis.client.xrevrange(this.redis.keys.stream(partition), '+', '-', 'COUNT', 1);
      return last[0]?.[0] ?? STREAM_START;
    }
    if (typeof to === 'object' && to !== null && 'id' in to && typeof to.id === 'string' && STREAM_ID.test(to.id))
      return previousStreamId(to.id);
    if (typeof to === 'object' && to !== null && 'time' in to && to.time instanceof Date && !Number.isNaN(to.time.getTime()))
      return offsetBeforeTime(to.time);
    throw new InvalidOptionError('to', to, "'start', 'end', { id: '<ms>-<seq>' } or { time: Date }");
  }

  private async removeGroup(group: string): Promise<void> {
    const { keys, client } = this.redis;
    const doomed = [keys.members(group), keys.memberInfo(group), keys.events(group), keys.seen(group), keys.deadLetters(group)];
    for (let p = 0; p < keys.partitions; p++) {
      doomed.push(keys.offset(group, p), keys.lease(group, p), keys.epoch(group, p), keys.recovery(group, p), keys.done(group, p));
    }
    // One key per command: the keys live in different cluster slots.
    await Promise.all([...doomed.map((key) => client.del(key)), client.srem(keys.groups, group)]);
  }

  private async assertGroup(group: string): Promise<void> {
    if (typeof group !== 'string' || !(await this.redis.client.sismember(this.redis.keys.groups, group))) {
      throw new UnknownGroupError(String(group));
    }
  }
}
