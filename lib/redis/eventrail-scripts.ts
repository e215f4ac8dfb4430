import type { ChainableCommander, Cluster, Redis } from 'ioredis';
import type { EventrailKeys } from './keys';
import {
  leanCommandsSupported,
  LeanTransaction,
  sendLean,
  sendLeanScript,
  sendLeanTransaction,
  type TransactionOutcome,
} from './lean-command';
import { type EventrailClient, type EventrailPipeline, leanScript, type ReadBacklogReply, registerScripts } from './scripts';
import type { XReadBufferReply } from './stream-read';
import { bigOrdinals, isBigEntry } from './big-entries';
import { isRefusal } from './server-probe';

export type { TransactionOutcome };

/** A transaction of appends (`EventrailScripts.beginTransaction`). */
export interface AppendTransaction {
  /** Redis answered a MULTI on this connection before: it may be flushed while it is built, and discarded. */
  readonly streamable: boolean;
  /** Something of it was written: only `commit` or `discard` ends it. */
  readonly started: boolean;
  add(partition: number, fields: readonly string[]): void;
  /**
   * Sets `call`'s run guard in `partition` as one run of it done, with the
   * appends: runs sent after the transaction from `runsBefore` 1 land only
   * if it did. Its place in the outcome follows the appends added before it.
   */
  guardRuns(partition: number, call: string, ttlMs: number): void;
  flush(): void;
  commit(): Promise<TransactionOutcome>;
  /**
   * Ends it with DISCARD, dropping what was not flushed: undefined once nothing of it was appended, or, where
   * Redis refused its MULTI (an ACL changed at run time), what each flushed append came to on its own.
   */
  discard(): Promise<TransactionOutcome | undefined>;
}

/**
 * The one door to eventrail's Lua scripts (redis/scripts/*.lua): one method
 * per script use, taking named arguments and answering a typed result. The
 * KEYS and ARGV of every call are built here, from the key schema, so no
 * caller knows a script's argument order or a key name.
 *
 * The scripts sent per batch on the hot path (a commit, a bounded backlog
 * read, a run of `publishMany`) and the hot plain commands (a publish's
 * XADD, a worker's XREAD) go through `lean-command.ts`, the only file that
 * relies on ioredis internals; where they are missing, the same calls go as
 * ioredis's own commands (`defineCommand`), which answer the same.
 */
export class EventrailScripts {
  private readonly client: EventrailClient;
  /** Hot-path calls through `LeanCommand` (false: as ioredis's own commands). */
  private readonly lean: boolean;
  /** Scripts are refused here: big entries go as plain XADDs, their partition marked as not indexed (see `append`). */
  private unindexed = false;

  constructor(
    client: Redis | Cluster,
    private readonly keys: EventrailKeys,
    { lean = leanCommandsSupported }: { lean?: boolean } = {},
  ) {
    this.client = registerScripts(client);
    this.lean = lean && leanCommandsSupported;
  }

  // Leases (acquireLease-5, renewLease-1, commitOffset-5, releaseLease-2, barMembers-2)

  /** Takes the lease of (group, partition) for `workerId`; null when another worker holds it (acquireLease-5.lua). */
  async acquireLease(input: AcquireLeaseInput): Promise<AcquireLeaseResult | null> {
    const { group, partition: p } = input;
    const { keys } = this;
    const reply = await this.client.eventrailAcquireLease(
      keys.lease(group, p),
      keys.epoch(group, p),
      keys.offset(group, p),
      keys.stream(p),
      keys.recovery(group, p),
      input.workerId,
      input.ttlMs,
      input.initialMode,
      input.initialId,
      input.generation,
    );
    if (!reply) return null;
    const [token, committed, previous] = reply;
    return { token, committed, previousHolder: PREVIOUS_HOLDER[previous] ?? 'released' };
  }

  /** Extends the lease of (group, partition) while it holds `token`: false when it no longer does (renewLease-1.lua). */
  async renewLease({ group, partition, token, ttlMs }: LeaseHold): Promise<boolean> {
    return (await this.client.eventrailRenewLease(this.keys.lease(group, partition), token, ttlMs)) === 1;
  }

  /**
   * Moves the committed offset of (group, partition) to `offset` while the
   * lease holds `token`, extends the lease, writes the done-marks of
   * `doneIds` (when `markTtlMs` > 0) and the offset's lag position, in one
   * atomic step (commitOffset-5.lua). False: fenced, the lease is not `token`'s.
   */
  async commitOffset(input: CommitOffsetInput): Promise<boolean> {
    const { group, partition: p, progress, markTtlMs } = input;
    const { keys } = this;
    const args: Array<string | number> = [
      keys.lease(group, p),
      keys.offset(group, p),
      keys.done(group, p),
      keys.recovery(group, p),
      keys.stream(p),
      input.token,
      input.offset,
      input.ttlMs,
      markTtlMs,
      progress?.since ?? '',
      progress?.from ?? '',
      progress?.count ?? '',
      progress?.verify ? '1' : '0',
      input.parked?.length ?? 0,
    ];
    if (input.parked) for (const [field, state] of input.parked) args.push(field, state);
    if (markTtlMs > 0) for (const id of input.doneIds) args.push(id);
    const result = this.lean
      ? await sendLeanScript<number>(this.client, leanScript('eventrailCommitOffset'), args)
      : await (this.client.eventrailCommitOffset as (...a: Array<string | number>) => Promise<number>)(...args);
    return result === 1;
  }

  /** Gives the lease back while it holds `token`, recording `epoch` as ended cleanly (releaseLease-2.lua). */
  async releaseLease({
    group,
    partition,
    token,
    epoch,
  }: {
    group: string;
    partition: number;
    token: string;
    epoch: string;
  }): Promise<'released' | 'cleared' | 'not-held'> {
    const reply = await this.client.eventrailReleaseLease(
      this.keys.lease(group, partition),
      this.keys.recovery(group, partition),
      token,
      epoch,
    );
    return reply === 1 ? 'released' : reply === 2 ? 'cleared' : 'not-held';
  }

  /**
   * Bars `workerIds` from taking (group, partition) for `ttlMs` (0 lifts the
   * bars) and takes its lease back when one of them holds it, or, with
   * `able`, anyone not in `able`; true when it did (barMembers-2.lua).
   */
  async barMembers({ group, partition, workerIds, ttlMs, able = [] }: BarMembersInput): Promise<boolean> {
    const { keys } = this;
    const reply = await this.client.eventrailBarMembers(
      keys.lease(group, partition),
      keys.recovery(group, partition),
      ttlMs,
      workerIds.length,
      ...workerIds,
      ...able,
    );
    return reply === 1;
  }

  // Recovery state (markDelivery-1, markFailure-1)

  /** Counts one more delivery of the entry after the committed offset `offset`; answers the count (markDelivery-1.lua). */
  markDelivery({ group, partition, offset }: PartitionEntry): Promise<number> {
    return this.client.eventrailMarkDelivery(this.keys.recovery(group, partition), offset);
  }

  /** Records that the entry at `offset` failed at `nowMs` (unless it had before); answers when it first failed, ms (markFailure-1.lua). */
  async markFailure({ group, partition, offset, nowMs }: PartitionEntry & { nowMs: number }): Promise<number> {
    return Number(await this.client.eventrailMarkFailure(this.keys.recovery(group, partition), offset, nowMs));
  }

  // Membership and groups (heartbeat-4, dropGroup-6, dropGroupPartition-4, resetOffset-6)

  /** Beats `workerId`'s heartbeat into `group` with its info (JSON); answers the group's generation and live members (heartbeat-4.lua). */
  async heartbeat({ group, workerId, ttlMs, infoJson }: HeartbeatInput): Promise<{ generation: string; members: string[] }> {
    const { keys } = this;
    const [generation, members] = await this.client.eventrailHeartbeat(
      keys.members(group),
      keys.memberInfo(group),
      keys.seen(group),
      keys.generation(group),
      workerId,
      ttlMs,
      infoJson,
    );
    return { generation, members };
  }

  /** Deletes `group`'s own keys and bumps its generation, unless a member is live (or, `stale`, was seen within `staleMs`) (dropGroup-6.lua). */
  async dropGroup({
    group,
    mode,
    staleMs,
  }: {
    group: string;
    mode: 'stale' | 'idle' | 'force';
    staleMs: number;
  }): Promise<DropGroupResult> {
    const [members, info, events, seen, dlq] = this.keys.groupOwnKeys(group);
    const [verdict, ...rest] = await this.client.eventrailDropGroup(
      members,
      info,
      events,
      seen,
      dlq,
      this.keys.generation(group),
      mode,
      staleMs,
    );
    if (verdict === 'dropped') return { verdict, generation: rest[0] };
    if (verdict === 'live') return { verdict, members: rest };
    return { verdict: 'recent' };
  }

  /** Drops (group, partition)'s keys unless a worker of `generation` took the partition (dropGroupPartition-4.lua). */
  dropGroupPartition({ group, partition, generation }: { group: string; partition: number; generation: string }): Promise<number> {
    const [offset, lease, recovery, done] = this.keys.groupPartitionKeys(group, partition);
    return this.client.eventrailDropGroupPartition(offset, lease, recovery, done, generation);
  }

  /**
   * Sets the committed offset of (group, partition) to `to`, ending its lease
   * and clearing its marks; `counted` gives the new offset a lag position.
   * Answers the previous offset, null when there was none (resetOffset-6.lua).
   */
  resetOffset({ group, partition: p, to, counted }: ResetOffsetInput): Promise<string | null> {
    const { keys } = this;
    const rest = counted ? ([counted.upTo, counted.count, counted.entriesAdded] as const) : ([] as const);
    return this.client.eventrailResetOffset(
      keys.lease(group, p),
      keys.offset(group, p),
      keys.epoch(group, p),
      keys.recovery(group, p),
      keys.done(group, p),
      keys.stream(p),
      to,
      ...rest,
    );
  }

  // Lag (readLag-3, reanchorPosition-2)

  /** The lag of (group, partition) from its position, -1 when the position cannot tell it, and its committed offset (readLag-3.lua). */
  async readLag({ group, partition }: { group: string; partition: number }): Promise<{ lag: number; committed: string | null }> {
    const { keys } = this;
    const [lag, committed] = await this.client.eventrailReadLag(
      keys.stream(partition),
      keys.offset(group, partition),
      keys.recovery(group, partition),
    );
    return { lag, committed };
  }

  /** After a trim: moves (group, partition)'s position anchor up to the new first entry (reanchorPosition-2.lua). */
  reanchorPosition({ group, partition, firstBeforeTrim }: { group: string; partition: number; firstBeforeTrim: string }): Promise<number> {
    return this.client.eventrailReanchorPosition(this.keys.stream(partition), this.keys.recovery(group, partition), firstBeforeTrim);
  }

  // Appends (publishDedup-4, appendMany-n, appendManyDedup-n, appendIndexed-3) and the plain XADD.
  // On a single server, every one but publishDedup (whose second run answers a duplicate), and the WAIT
  // after them, is sent at most once: a connection that closes before its reply rejects it with
  // `AppendReplyLost` instead of ioredis sending it again (see `sendAppendsOnce` in lean-command.ts).

  /**
   * Appends one event's `fields` to `partition`'s stream; answers its offset. A big entry
   * (big-entries.ts) goes through appendIndexed-3.lua, which records it in the partition's index
   * of big entries. Where scripts are refused (scripting off, an ACL without EVALSHA: known from
   * startup, see `markIndexedFrom`), big entries go as plain XADDs, each sent right after a write
   * that marks the partition as not indexed (`unindexed`). A refusal that comes later (an ACL
   * changed under a running app) fails that append, and the next ones go plainly.
   */
  append(partition: number, fields: string[]): Promise<string> {
    const stream = this.keys.stream(partition);
    if (isBigEntry(fields)) return this.appendBig(partition, fields);
    if (this.lean) return sendLean<string>(this.client, 'xadd', [stream, '*', ...fields], false, true);
    return this.client.xadd(stream, '*', ...fields) as Promise<string>;
  }

  /** `append` queued on `pipeline`: one command either way (a plain XADD, or appendIndexed-3 for a big entry), whose reply is the offset. */
  queueAppend(pipeline: ChainableCommander, partition: number, fields: string[]): void {
    const { keys } = this;
    if (!isBigEntry(fields)) pipeline.xadd(keys.stream(partition), '*', ...fields);
    else if (this.unindexed) pipeline.xadd(keys.stream(partition), '*', ...fields);
    else
      (pipeline as EventrailPipeline).eventrailAppendIndexed(
        keys.stream(partition),
        keys.bigEntries(partition),
        keys.indexedFrom(partition),
        ...fields,
      );
  }

  /**
   * `WAIT replicas timeoutMs` after appends on the same connection: how many replicas confirmed
   * them. Sent at most once, as the appends are: sent again on a new connection, a WAIT counts the
   * replicas that have that connection's writes (none), and answered a frozen replica as confirmed.
   */
  waitForReplicas(replicas: number, timeoutMs: number): Promise<number> {
    if (this.lean) return sendLean<number>(this.client, 'wait', [replicas, timeoutMs], false, true);
    return this.client.wait(replicas, timeoutMs);
  }

  /**
   * Sets each partition's indexed-from mark where it has none (readIndex-3.lua): at the stream's last
   * entry (0-0 for a new log), so entries appended before eventrail indexed big entries are read with
   * the byte-counting script, and the rest plainly. Run at startup, before anything is appended; where
   * it cannot write (a read-only user, a full Redis), the first read of the partition sets it. Where
   * Redis refuses the script (an ACL without EVALSHA, scripting off), big entries go unindexed from the
   * first one on (`scriptsRefused`), rather than a first big `publish` failing on the refusal.
   */
  async markIndexedFrom(): Promise<void> {
    const { keys } = this;
    await Promise.all(
      Array.from({ length: keys.partitions }, (_, p) =>
        this.client.eventrailReadIndex(keys.stream(p), keys.bigEntries(p), keys.indexedFrom(p), '0-0').catch((error: unknown) => {
          if (error instanceof Error && isRefusal(error.message)) this.unindexed = true;
        }),
      ),
    );
  }

  /**
   * What the publisher learnt (or this door did): scripts are refused here, so big entries go as
   * plain XADDs after a write that marks their partition as not indexed.
   */
  scriptsRefused(): void {
    this.unindexed = true;
  }

  /** Whether big entries go unindexed here (`scriptsRefused`): a pipeline that queues one must queue `queueUnindexed` before it. */
  get appendsUnindexed(): boolean {
    return this.unindexed;
  }

  /** Marks `partition` as not indexed (see `scriptsRefused`), queued on `pipeline` before its first unindexed big entry. */
  queueUnindexed(pipeline: ChainableCommander, partition: number): void {
    pipeline.set(this.keys.indexedFrom(partition), 'none');
  }

  private appendBig(partition: number, fields: string[]): Promise<string> {
    const { keys } = this;
    const stream = keys.stream(partition);
    if (this.unindexed) {
      // Sent before the XADD on the same connection: no worker reads the entry before the mark is there.
      this.client.set(keys.indexedFrom(partition), 'none').catch(() => undefined);
      if (this.lean) return sendLean<string>(this.client, 'xadd', [stream, '*', ...fields], false, true);
      return this.client.xadd(stream, '*', ...fields) as Promise<string>;
    }
    const args = [stream, keys.bigEntries(partition), keys.indexedFrom(partition), ...fields];
    const appending = this.lean
      ? sendLeanScript<string>(this.client, leanScript('eventrailAppendIndexed'), args, false, undefined, true)
      : this.client.eventrailAppendIndexed(stream, keys.bigEntries(partition), keys.indexedFrom(partition), ...fields);
    return appending.catch((error: unknown) => {
      if (error instanceof Error && isRefusal(error.message)) this.unindexed = true;
      throw error;
    });
  }

  /** Appends `fields` unless event `id` was appended within `windowMs`; answers `[offset, duplicate]` (publishDedup-4.lua). */
  publishDedup(input: PublishDedupInput): Promise<PublishDedupReply> {
    return this.client.eventrailPublishDedup(...this.publishDedupArgs(input)) as Promise<PublishDedupReply>;
  }

  /** `publishDedup` queued on `pipeline` (one made with `client.pipeline()`). */
  queuePublishDedup(pipeline: ChainableCommander, input: PublishDedupInput): void {
    (pipeline as EventrailPipeline).eventrailPublishDedup(...this.publishDedupArgs(input));
  }

  /**
   * A transaction of appends built event by event (`add`), which may be
   * written in parts as it is built (`flush`, where `streamable`), then ended
   * with `commit` (each event's offset or error) or `discard` (nothing
   * appended, unless Redis refused its MULTI: see `AppendTransaction`).
   * Undefined where `appendTransaction` would answer undefined.
   */
  beginTransaction(): AppendTransaction | undefined {
    if (!this.lean) return undefined;
    const transaction = LeanTransaction.begin(this.client);
    if (!transaction) return undefined;
    const { keys } = this;
    return {
      streamable: LeanTransaction.confirmed(this.client),
      get started() {
        return transaction.started;
      },
      add: (partition, fields) => transaction.add(keys.stream(partition), fields),
      // The value a guarded run's script sets once one run of the call is done (appendMany-n.lua).
      guardRuns: (partition, call, ttlMs) => transaction.addCommand(['SET', keys.runGuard(partition, call), '1', 'PX', String(ttlMs)]),
      flush: () => transaction.flush(),
      commit: () => transaction.commit(),
      discard: () => transaction.discard(),
    };
  }

  /**
   * Appends events as one transaction of plain XADDs (MULTI ... EXEC, see
   * `sendLeanTransaction` in lean-command.ts): all of them or none, each
   * costing Redis what an XADD does. Answers each event's offset or error, in
   * order. Undefined, with nothing sent, where a transaction cannot be written
   * now (a Cluster, an ioredis without the internals, a connection that is
   * not ready, a `keyPrefix` or `reconnectOnError` on the client): send runs
   * then. Not for big entries, whose offsets must be indexed as they land.
   */
  appendTransaction(events: ReadonlyArray<{ partition: number; fields: readonly string[] }>): Promise<TransactionOutcome> | undefined {
    if (!this.lean) return undefined;
    const { keys } = this;
    const appends = new Array<{ key: string; fields: readonly string[] }>(events.length);
    for (let i = 0; i < events.length; i++) appends[i] = { key: keys.stream(events[i].partition), fields: events[i].fields };
    return sendLeanTransaction(this.client, appends);
  }

  /**
   * Appends the `events` (events without ids of their own) to `partition`'s
   * stream in order, in one call; answers their offsets, and the error when
   * an append failed after `offsets.length` were made, or when the `guard`
   * held the run back (`GUARDED ...`, nothing appended) (appendMany-n.lua).
   * With `width` 0, `events` is a `PackedEvents`; with a `width`, every event
   * has that many field values and `events` holds only the values, back to
   * back, which Redis checks in one step instead of once per event. The
   * big events are weighed here (`bigOrdinals`) and named to the script,
   * which indexes them without weighing each event again.
   */
  appendMany(input: AppendManyInput): Promise<AppendManyReply> {
    const [numberOfKeys, args] = this.appendManyArgs(input);
    if (this.lean) return sendLeanScript<AppendManyReply>(this.client, leanScript('eventrailAppendMany'), args, false, numberOfKeys, true);
    return this.client.eventrailAppendMany(numberOfKeys, ...args) as Promise<AppendManyReply>;
  }

  /** `appendMany` queued on `pipeline` (one made with `client.pipeline()`, on a Cluster too: one partition's slot). */
  queueAppendMany(pipeline: ChainableCommander, input: AppendManyInput): void {
    const [numberOfKeys, args] = this.appendManyArgs(input);
    (pipeline as EventrailPipeline).eventrailAppendMany(numberOfKeys, ...args);
  }

  private appendManyArgs({ partition, events, width = 0, guard }: AppendManyInput): [number, Array<string | number>] {
    const { keys } = this;
    const stream = keys.stream(partition);
    const index = [keys.bigEntries(partition), keys.indexedFrom(partition)];
    const bigs = bigOrdinals(events, width);
    const args: Array<string | number> = guard
      ? [stream, ...index, keys.runGuard(partition, guard.call), width, bigs, guard.runsBefore, guard.more ? '1' : '0', guard.ttlMs]
      : [stream, ...index, width, bigs];
    for (const value of events) args.push(value);
    return [guard ? 4 : 3, args];
  }

  /** Resolves when this connection runs the appendMany script (a call that appends nothing); rejects with the server's refusal. */
  async checkAppendMany(): Promise<void> {
    const { keys } = this;
    await this.client.eventrailAppendMany(3, keys.stream(0), keys.bigEntries(0), keys.indexedFrom(0));
  }

  /**
   * `appendMany` for events with ids of their own and producer dedup: event
   * `i` is appended unless `ids[i]` was within `windowMs`; with `windowMs` 0
   * (and no `ids`), each event is appended. With `guard`, the run is appended
   * only when every run sent before it under the same guard was done (see
   * `RunGuard`). Answers the offsets, whether each was a duplicate, and the
   * error when a command failed after `offsets.length` events were done, or
   * when the guard held the run back (`GUARDED ...`, nothing appended)
   * (appendManyDedup-n.lua).
   */
  appendManyDedup(input: AppendManyDedupInput): Promise<AppendManyDedupReply> {
    const [numberOfKeys, args] = this.appendManyDedupArgs(input);
    if (this.lean) return sendLeanScript(this.client, leanScript('eventrailAppendManyDedup'), args, false, numberOfKeys, true);
    return this.client.eventrailAppendManyDedup(numberOfKeys, ...args) as Promise<AppendManyDedupReply>;
  }

  /** `appendManyDedup` queued on `pipeline` (one made with `client.pipeline()`, on a Cluster too: one partition's slot). */
  queueAppendManyDedup(pipeline: ChainableCommander, input: AppendManyDedupInput): void {
    const [numberOfKeys, args] = this.appendManyDedupArgs(input);
    (pipeline as EventrailPipeline).eventrailAppendManyDedup(numberOfKeys, ...args);
  }

  private appendManyDedupArgs({ partition, ids, windowMs, events, guard }: AppendManyDedupInput): [number, Array<string | number>] {
    const { keys } = this;
    const args: Array<string | number> = [keys.stream(partition), keys.bigEntries(partition), keys.indexedFrom(partition)];
    if (windowMs > 0) for (const id of ids) args.push(this.keys.dedup(partition, id));
    if (guard) args.push(this.keys.runGuard(partition, guard.call));
    const numberOfKeys = args.length;
    args.push(windowMs);
    if (guard) args.push(guard.runsBefore, guard.more ? '1' : '0', guard.ttlMs);
    else args.push('', '', '');
    args.push(bigOrdinals(events, 0));
    for (const value of events) args.push(value);
    return [numberOfKeys, args];
  }

  // Locks (releaseLock-1, takeLock-1, and renewLease-1 for the retention lock)

  /** Extends the retention lock while it holds `token`; false when it no longer does (renewLease-1.lua). */
  async extendRetentionLock({ token, ttlMs }: { token: string; ttlMs: number }): Promise<boolean> {
    return (await this.client.eventrailRenewLease(this.keys.retentionLock(), token, ttlMs)) === 1;
  }

  /** Deletes the retention lock if it still holds `token` (releaseLock-1.lua). */
  async releaseRetentionLock({ token }: { token: string }): Promise<void> {
    await this.client.eventrailReleaseLock(this.keys.retentionLock(), token);
  }

  /**
   * Takes the retention lock with `token` on a Redis over maxmemory, which
   * refuses the plain `SET NX PX` (takeLock-1.lua declares allow-oom; Redis
   * 7.0+): true when taken, false when another instance holds it.
   */
  async takeRetentionLockWhenFull({ token, ttlMs }: { token: string; ttlMs: number }): Promise<boolean> {
    return (await this.client.eventrailTakeLock(this.keys.retentionLock(), token, ttlMs)) === 1;
  }

  /** Queues on `pipeline` the release of `group`'s replay claim on dead letter `id`, if it still holds `token` (releaseLock-1.lua). */
  queueReleaseReplayClaim(pipeline: ChainableCommander, { group, id, token }: { group: string; id: string; token: string }): void {
    (pipeline as EventrailPipeline).eventrailReleaseLock(this.keys.replayClaim(group, id), token);
  }

  // Retention (trimLog-3, markArchived-1)

  /**
   * Trims `partition`'s stream below `minId` unless that would pass its
   * archive marks (with `sinkId`, or any, unless `allowUnarchived`). Answers
   * the entries trimmed, -1 or -2 when refused (trimLog-3.lua).
   */
  async trimLog({ partition, minId, approximate, sinkId, allowUnarchived }: TrimLogInput): Promise<number> {
    const { keys } = this;
    return this.client.eventrailTrimLog(
      keys.stream(partition),
      keys.archived(partition),
      keys.bigEntries(partition),
      minId,
      approximate ? '~' : '=',
      sinkId,
      allowUnarchived ? '1' : '0',
    );
  }

  /** Records `partition`'s archive mark for `sinkId` on a Redis over maxmemory, which refuses the plain `HSET` (markArchived-1.lua). */
  async markArchivedWhenFull({ partition, sinkId, lastId }: { partition: number; sinkId: string; lastId: string }): Promise<void> {
    await this.client.eventrailMarkArchived(this.keys.archived(partition), sinkId, lastId);
  }

  // Dead letters (purgeStream-1)

  /** Deletes `group`'s dead letters and answers how many there were, in one atomic step that runs on a full Redis too (purgeStream-1.lua). */
  purgeDeadLetters({ group }: { group: string }): Promise<number> {
    return this.client.eventrailPurgeStream(this.keys.deadLetters(group));
  }

  // Reads on a connection of the caller's (a worker's blocking connection)

  /**
   * At most `count` entries of `stream` after `after`, and at most `maxBytes` of them unless the first is
   * bigger, as XRANGE answers them (readBacklog-1.lua), on `connection`;
   * with the size of the biggest entry read and of the entry left out for the bytes (0 when none was).
   */
  static async readBacklog(
    connection: Redis | Cluster,
    stream: string,
    after: string,
    count: number,
    maxBytes: number,
    /** The biggest entry the caller saw lately (0: none), which sizes the script's first chunks. */
    known = 0,
  ): Promise<BacklogRead> {
    const [entries, largest, left] = leanCommandsSupported
      ? await sendLeanScript<ReadBacklogReply>(
          connection,
          leanScript('eventrailReadBacklog'),
          [stream, after, count, maxBytes, known],
          true,
        )
      : await registerScripts(connection).eventrailReadBacklogBuffer(stream, after, count, maxBytes, known);
    return { entries, largest: Number(largest), left: Number(left) };
  }

  /** `XREAD COUNT count BLOCK blockMs STREAMS stream after` on `connection`, read as Buffers; without `blockMs`, a read that does not wait. */
  static readStream(
    connection: Redis | Cluster,
    stream: string,
    after: string,
    count: number,
    blockMs?: number,
  ): Promise<XReadBufferReply> {
    const args =
      blockMs === undefined ? ['COUNT', count, 'STREAMS', stream, after] : ['COUNT', count, 'BLOCK', blockMs, 'STREAMS', stream, after];
    if (leanCommandsSupported) return sendLean<XReadBufferReply>(connection, 'xread', args, true);
    return (connection.xreadBuffer as (...a: Array<string | number>) => Promise<XReadBufferReply>)(...args);
  }

  /**
   * What a worker that is behind needs to read `partition` with plain XRANGE (readIndex-3.lua), on
   * `connection`: from where the index of big entries is complete (`none` when it is not), the first
   * big entry after `after` ('' when none), and Redis's time in ms.
   */
  static async readIndex(
    connection: Redis | Cluster,
    keys: IndexKeys,
    after: string,
  ): Promise<{ from: string; next: string; now: string }> {
    const [from, next, now] = await registerScripts(connection).eventrailReadIndex(keys.stream, keys.bigEntries, keys.indexedFrom, after);
    return { from: String(from), next: String(next), now: String(now) };
  }

  /** `XRANGE stream (after end COUNT count` on `connection`, read as Buffers (`end` may be exclusive, `(<id>`). */
  static readRange(
    connection: Redis | Cluster,
    stream: string,
    after: string,
    end: string,
    count: number,
  ): Promise<Array<[Buffer, Buffer[]]>> {
    const args = [stream, `(${after}`, end, 'COUNT', count];
    if (leanCommandsSupported) return sendLean<Array<[Buffer, Buffer[]]>>(connection, 'xrange', args, true);
    return connection.xrangeBuffer(stream, `(${after}`, end, 'COUNT', count);
  }

  /** The id and size in bytes of the entry after `after`, without sending the entry (entrySize-1.lua); null when none follows. */
  static async entrySize(connection: Redis | Cluster, stream: string, after: string): Promise<{ id: string; bytes: number } | null> {
    const reply = await registerScripts(connection).eventrailEntrySize(stream, after);
    return reply ? { id: String(reply[0]), bytes: Number(reply[1]) } : null;
  }

  private publishDedupArgs({ partition, id, windowMs, fields }: PublishDedupInput): [string, string, string, string, number, ...string[]] {
    const { keys } = this;
    return [
      keys.dedup(partition, id),
      keys.stream(partition),
      keys.bigEntries(partition),
      keys.indexedFrom(partition),
      windowMs,
      ...fields,
    ];
  }
}

const PREVIOUS_HOLDER: Record<number, AcquireLeaseResult['previousHolder']> = { 0: 'released', 1: 'unreleased', 2: 'droppedGeneration' };

/** The keys of a partition a worker reads with readIndex-3.lua. */
export interface IndexKeys {
  stream: string;
  bigEntries: string;
  indexedFrom: string;
}

/** A backlog read bounded by bytes (readBacklog-1.lua): sizes are an entry's id, field names and values, in bytes. */
export interface BacklogRead {
  /** As XRANGE answers them, read as Buffers. */
  entries: Array<[id: Buffer, fields: Buffer[]]>;
  /** The biggest entry read (0 when none). */
  largest: number;
  /** The entry after the last one read, when the byte bound left it out; 0 when the count or the stream's end stopped the read. */
  left: number;
}

/** A (group, partition) and a stream id in it. */
interface PartitionEntry {
  group: string;
  partition: number;
  offset: string;
}

interface LeaseHold {
  group: string;
  partition: number;
  /** `<workerId>:<epoch>`, as `acquireLease` answered it. */
  token: string;
  ttlMs: number;
}

export interface BarMembersInput {
  group: string;
  partition: number;
  workerIds: readonly string[];
  /** How long the bars hold (ms); 0 lifts them. */
  ttlMs: number;
  /** The live members able to work the partition: a lease held by anyone else is taken back (not barred). */
  able?: readonly string[];
}

export interface AcquireLeaseInput {
  group: string;
  partition: number;
  workerId: string;
  ttlMs: number;
  /** Where a group that never read the partition starts: its start, its end, or after `initialId`. */
  initialMode: 'start' | 'end' | 'id';
  /** With `initialMode: 'id'`: the offset to start after; else ''. */
  initialId: string;
  /** The group's generation as the worker's last heartbeat saw it. */
  generation: string;
}

export interface AcquireLeaseResult {
  /** `<workerId>:<epoch>`, which fences every commit. */
  token: string;
  /** The committed offset (initialised the first time the group reads the partition). */
  committed: string;
  /**
   * `unreleased`: the previous holder did not release the lease (it died,
   * froze or lost Redis). `droppedGeneration`: a deleted generation of the
   * group left the partition's keys, cleared now except its done-marks.
   */
  previousHolder: 'released' | 'unreleased' | 'droppedGeneration';
}

export interface CommitOffsetInput extends LeaseHold {
  /** The new committed offset. */
  offset: string;
  /** TTL of the idempotency done-marks; 0 writes none. */
  markTtlMs: number;
  /** The event ids handled in this batch, marked done when `markTtlMs` > 0. */
  doneIds: readonly string[];
  /** What the commit moved over, for the offset's lag position; without it the position is forgotten. */
  progress?: { since: string; from: string; count: number; verify: boolean };
  /** Parked lines that changed since the last commit: the line's field and its state, or '' when it was released. */
  parked?: ReadonlyArray<readonly [field: string, state: string]>;
}

export interface HeartbeatInput {
  group: string;
  workerId: string;
  ttlMs: number;
  /** The member's info, JSON. */
  infoJson: string;
}

export type DropGroupResult = { verdict: 'dropped'; generation: string } | { verdict: 'live'; members: string[] } | { verdict: 'recent' };

export interface ResetOffsetInput {
  group: string;
  partition: number;
  to: string;
  /** An exact count of the entries after `to` up to `upTo`, which was the last entry when `entriesAdded` was read. */
  counted?: { upTo: string; count: number; entriesAdded: number };
}

export interface PublishDedupInput {
  partition: number;
  /** The event's own id, which dedup is keyed by. */
  id: string;
  windowMs: number;
  fields: string[];
}

/** `[offset, 1 when it was a duplicate]`. */
export type PublishDedupReply = [offset: string, duplicate: number];

/**
 * Events packed for an append run: per event, its number of field values,
 * then the values (`[2, 'type', 'a', 4, 'type', 'b', 'data', '{}']`). Built
 * by the caller as it goes, so a run costs one array.
 */
export type PackedEvents = Array<string | number>;

export interface AppendManyInput {
  partition: number;
  events: PackedEvents;
  /** The field count of every event, `events` then holding only the values; 0 when `events` is `PackedEvents`. @default 0 */
  width?: number;
  guard?: RunGuard;
}

/**
 * `[offsets]`, or `[offsets, error]` when an append failed after `offsets.length` were made, or the guard held
 * the run back (an error starting with `GUARDED`).
 */
export type AppendManyReply = [offsets: string[], error?: string];

export interface AppendManyDedupInput {
  partition: number;
  /** Event `i`'s own id (none when `windowMs` is 0). */
  ids: readonly string[];
  /** The dedup window; 0 appends every event. */
  windowMs: number;
  events: PackedEvents;
  guard?: RunGuard;
}

/**
 * Where one call sends a partition several runs, each one names the call
 * and how many of its runs went before it: Redis appends a run only when all
 * of those were done, so what lands in the partition is a prefix of what the
 * call sent to it, even when Redis refused one run and would take the next.
 */
export interface RunGuard {
  /** Unique per call (and partition). */
  call: string;
  runsBefore: number;
  /** More runs of the call follow this one in the partition. */
  more: boolean;
  /** How long a guard may outlive its call's connection (ms). */
  ttlMs: number;
}

/**
 * `[offsets, duplicates]`, or `[offsets, duplicates, error]` when a command failed after `offsets.length` events were
 * done, or the guard held the run back (an error starting with `GUARDED`).
 */
export type AppendManyDedupReply = [offsets: string[], duplicates: number[], error?: string];

export interface TrimLogInput {
  partition: number;
  minId: string;
  /** `XTRIM MINID ~` rather than `=`. */
  approximate: boolean;
  /** The archive sink this cycle saved to ('' for none). */
  sinkId: string;
  /** Trim past the archive marks without a sink. */
  allowUnarchived: boolean;
}
