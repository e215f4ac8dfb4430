import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import type { ResolvedConsumerOptions } from '../consumer.options';
import { EntryOrigin, isMalformed, MalformedEntry, RawEntry } from '../../wire/codec';
import { compareStreamIds } from '../../wire/stream-id';
import { BLOCK_MS } from '../../redis/stream-read';
import type { MetricsHooks } from '../../metrics/eventrail-metrics';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import type { IndexKeys } from '../../redis/eventrail-scripts';
import { describeError, errorStack } from '../../util/describe-error';
import { logRecord, type LogFields, type LogRecord } from '../../util/log-record';
import { withTimeout } from '../../util/timeout';
import { Fetch, type FetchContext } from './fetch';
import { CommitQueue } from './commit-queue';
import { SHUTDOWN_REDIS_WAIT_MS, StopDeadline } from './stop-deadline';
import type { GroupStats } from './group-stats';
import type { PartitionLease } from '../coordination/lease';
import type { MessageProcessor } from '../handling/message-processor';
import { PartitionReader } from './partition-reader';
import { ReadTally } from './read-tally';
import { RecoveryWindow } from '../coordination/recovery-window';
import { ParkedLines } from '../handling/parked-lines';
import { ParkedRedelivery } from './parked-redelivery';
import type { Semaphore } from '../../util/semaphore';
import { StopSignal } from '../../util/stop-signal';

const READ_ERROR_BACKOFF_MS = 1_000;
/**
 * Least time between two commits of one partition (see `CommitQueue`): at a
 * few thousand one-event batches a second, a commit per batch would double
 * the commands and the Redis time per event, and sit in the tail. 25 ms, not
 * the 5 it was: each commit is a write that wakes Redis on a machine the
 * producer, Redis and the consumer share, and at 2000 events/s 170 commits a
 * second put eventrail's p99 at 1.55× the raw loop's, 40 a second at 1.31×
 * (docs/performance.md). A crash replays at most 25 ms more.
 */
const COMMIT_SPACING_MS = 25;
/** The longest caught-up fetch whose next read is sent once it is handled rather than before (see runFetch). */
const READ_AFTER_FETCH_MAX = 2;

type Entry = RawEntry | MalformedEntry;

/** Where a step of the loop leaves the worker: reading on, or ended (stopped, or the lease is lost). */
type Step = 'continue' | 'end';

export interface PartitionWorkerParams {
  /** The lease this worker holds; it fences every commit. */
  lease: PartitionLease;
  /** Committed offset when the lease was taken. */
  committed: string;
  /**
   * The previous owner did not release the lease (it died, froze or lost
   * Redis): handle entries one at a time, counting deliveries, for a while.
   */
  recovering: boolean;
  stats: GroupStats;
  metrics: MetricsHooks;
  redis: EventrailRedis;
  processor: MessageProcessor;
  semaphore: Semaphore;
  options: ResolvedConsumerOptions;
  /** Told of every commit that landed (what `EventrailConsumers.settled()` waits on). */
  onCommitted?: (partition: number, offset: string) => void;
  /**
   * With `'key'` or `'unordered'` ordering: this partition's parked lines (loaded when the worker
   * starts, written with its commits) and the processor that tries a parked head once.
   */
  parking?: Parking;
  /** The blocking read connection, opened and answering (see `openReadConnection`); a new one when absent. */
  connection?: Redis | Cluster;
}

export interface Parking {
  lines: ParkedLines;
  retryProcessor: MessageProcessor;
  /**
   * With `'partition'` ordering: used only when members with `'key'` or `'unordered'` left parked lines
   * in the partition (a rolling deploy that changes `ordering`). The worker then works the partition
   * with `'key'` ordering through `processor` until it lets it go, so the later messages of a parked
   * key still wait behind it, and the parked ones are still redelivered.
   */
  inherited?: { processor: MessageProcessor };
}

/**
 * Works one (group, partition) while this process holds its lease: fetches
 * entries from the committed offset on its own blocking connection, prefetches
 * the next fetch while handling this one, and commits once per fetch through
 * the fenced commit script. Loses the partition at once when a commit or a
 * renewal finds the lease taken over.
 */
export class PartitionWorker {
  private readonly logger = new Logger(PartitionWorker.name);
  /** Stops the fetch in hand: fired on stop or fencing, and halted while the lease may have expired unheard of. */
  private readonly stop: StopSignal;
  private readonly streamKey: string;
  /** What the derived event ids of this partition's entries are made of. */
  private readonly origin: EntryOrigin;
  private readonly recovery: RecoveryWindow;
  private connection?: Redis | Cluster;
  private current?: Fetch;
  private committed: string;
  /** Where the next read starts: the last entry taken on. */
  private cursor: string;
  /** The read in flight, from `cursor`. */
  private next: Promise<Entry[]> = Promise.resolve([]);
  /** Reads this partition: blocking while caught up, packed by Redis while behind. */
  private reader?: PartitionReader;
  private loop?: Promise<void>;
  /** Commits leave from here, one in flight at a time, so no batch waits for the previous one's commit. */
  private readonly commits: CommitQueue;
  private ended?: Promise<void>;
  private lost = false;
  private clearedRevoked = false;
  /** The stop gave up waiting for Redis: what still answers late is not reported. */
  private leaving = false;
  /** The stop's final commit is done and the lease is being released: a redelivery that outlived the stop commits nothing. */
  private released = false;
  private draining = false;
  /**
   * Ends the wait for the read in hand with no entries when draining starts (a read queued on a
   * reconnecting connection is not settled by disconnect()). One per read, replaced by the next:
   * nothing long-lived holds on to a read (see `untilDrained`). The wait's own resolve function,
   * called with `[]`, not a closure around it: a closure made per read and kept on this long-lived
   * worker was one of the things that made young-generation GCs promote every batch read since the
   * one before (docs/performance.md, "the tail").
   */
  private wake?: (entries: Entry[]) => void;
  private readonly fetchContext: FetchContext;
  /** Entries per read: the group's `batchSize`, or its largest batch handler's `maxSize` when that is more. */
  private readonly readSize: number;
  /** Counts what each commit moves over, for the offset's lag position. */
  private readonly tally: ReadTally;
  /** The newest mark queued for commit: what a commit that only stores parked lines carries. */
  private lastMark?: string;
  /** Brings parked messages back (`'key'` and `'unordered'` ordering). */
  private redelivery?: ParkedRedelivery;
  /** The parked lines this worker works: `params.parking`, unless they are inherited ones and there were none. */
  private parking?: Parking;
  /** The processor of this partition's fetches: `params.processor`, or the inherited parking's. */
  private processor: MessageProcessor;

  constructor(private readonly params: PartitionWorkerParams) {
    const { lease, processor, semaphore, stats, metrics, options } = params;
    this.parking = params.parking;
    this.processor = processor;
    this.stop = new StopSignal(() => lease.mayHaveExpired);
    this.streamKey = params.redis.keys.stream(lease.partition);
    this.origin = { partition: lease.partition, logTag: params.redis.keys.logTag };
    this.committed = this.cursor = params.committed;
    this.tally = new ReadTally(params.committed);
    this.recovery = new RecoveryWindow(params.recovering ? options.batchSize : 0, lease, options.maxDeliveries, processor, stats);
    this.readSize = Math.max(options.batchSize, processor.largestBatch);
    this.commits = new CommitQueue((mark, doneIds) => this.commit(mark, doneIds), COMMIT_SPACING_MS);
    this.fetchContext = {
      partition: lease.partition,
      processor,
      semaphore,
      stop: this.stop,
      stats,
      group: lease.group,
      metrics,
      // 'unordered' too: a parked message read again after a take-over is its line's, not the fetch's.
      parked: options.ordering !== 'partition',
    };
  }

  get partition(): number {
    return this.params.lease.partition;
  }

  get lease(): PartitionLease {
    return this.params.lease;
  }

  /** False once the worker was told to stop or lost its lease. */
  get active(): boolean {
    return !this.draining;
  }

  /**
   * True while the lease is this worker's to keep: also while it stops (its handlers finish, its last
   * commit is made), until it releases the lease, lost it, or gave up on Redis. Renewed for that long.
   */
  get holdsLease(): boolean {
    return !this.lost && !this.released && !this.leaving;
  }

  /** The offset this worker last committed (or found when it took the partition). */
  get committedOffset(): string {
    return this.committed;
  }

  /** The parked lines this worker was given (with `'partition'` ordering, used only if some were inherited). */
  get parkedLines(): ParkedLines | undefined {
    return this.params.parking?.lines;
  }

  /** Whether its blocking read connection is up now; false while it reconnects, or Redis refuses it. */
  get reading(): boolean {
    return this.connection?.status === 'ready';
  }

  /** True when it cleared its lease, revoked by an operator, once its handlers ended: the others may take the partition now. */
  get clearedRevokedLease(): boolean {
    return this.clearedRevoked;
  }

  /** True when the worker ended because its lease was taken over. */
  get wasLost(): boolean {
    return this.lost;
  }

  start(onEnd: (worker: PartitionWorker) => void): void {
    this.connection = this.params.connection ?? this.params.redis.duplicateForReads();
    this.loop = this.run().catch((error: unknown) => {
      this.logger.error(this.record(`stopped on an unexpected error: ${describeError(error)}`, { stack: errorStack(error) }));
      this.abort();
    });
    void this.loop.finally(() => onEnd(this));
  }

  /**
   * Stops fetching, commits what is done and releases the lease so another
   * worker can take over at once. `finishBatch` (a hand-back while the process
   * keeps running) lets the batch in hand complete; otherwise (shutdown) only
   * handlers already running finish. Either way at most `timeoutMs` is waited.
   */
  stopGracefully(timeoutMs: number, finishBatch = false): Promise<void> {
    // A shutdown that comes while a hand-back finishes its batch: the rest of the batch does not start.
    if (this.ended && !finishBatch) this.halt();
    this.ended ??= this.finish(timeoutMs, finishBatch);
    return this.ended;
  }

  /** The stop under way, as it was asked for (a hand-back's goes on finishing its batch); a shutdown's if none is. */
  stopped(timeoutMs: number): Promise<void> {
    return this.ended ?? this.stopGracefully(timeoutMs);
  }

  /** The lease is gone: stop now, commit nothing, release nothing (it belongs to someone else). */
  abort(): void {
    this.lost = true;
    this.commits.cancel();
    this.halt();
  }

  private async finish(timeoutMs: number, finishBatch: boolean): Promise<void> {
    if (finishBatch) this.drain();
    else this.halt();
    const finished = await withTimeout(
      Promise.all([this.loop, this.redelivery?.stop()]).then(() => true),
      timeoutMs,
      () => false,
    );
    if (!finished) {
      this.logger.warn(this.record(`handlers still running after ${timeoutMs} ms; committing what is done`));
      this.halt();
    }
    if (!this.params.redis.isReady()) {
      // Nothing can be committed or released now: the next owner takes over when the lease expires.
      this.logger.warn(this.record(`Redis is unreachable; leaving without a final commit`));
      return;
    }
    // A connection that looks ready may not answer (a network cut that closed nothing): the wait is bounded.
    const outcome = await new StopDeadline(SHUTDOWN_REDIS_WAIT_MS).within(this.commitAndRelease(finished));
    if (outcome !== 'late') return;
    this.leaving = true;
    this.commits.cancel();
    const msg = `Redis did not answer the final commit and release within ${SHUTDOWN_REDIS_WAIT_MS} ms; leaving without them (the lease expires on its own, and the next owner starts from the last commit that landed)`;
    this.logger.warn(this.record(msg));
  }

  /**
   * The last commit (what is done, and the parked lines' changes) and the lease's release. A lost
   * lease is not this worker's to commit with; if an operator revoked it, it is cleared once every
   * handler this worker started has ended (`handlersEnded`), so the next owner can start at once.
   */
  private async commitAndRelease(handlersEnded: boolean): Promise<void> {
    try {
      await this.commits.flush();
      if (this.lost) {
        if (handlersEnded) await this.releaseRevoked();
        return;
      }
      // Redeliveries cut off by the shutdown timeout are not crashes: the release below is clean.
      this.parking?.lines.clearRunning();
      const mark = this.current?.watermark();
      if (mark && compareStreamIds(mark, this.committed) > 0) await this.commit(mark, this.current?.handledIds);
      else if (this.parking?.lines.hasChanges) await this.commit(this.committed);
      if (this.leaving) return;
      this.released = true;
      // A final commit fenced because an operator revoked the lease meanwhile: cleared as above.
      if (!this.lost) await this.params.lease.release();
      else if (handlersEnded) await this.releaseRevoked();
    } catch (error) {
      if (!this.leaving)
        this.logger.warn(this.record(`could not commit and release on stop (${describeError(error)}); the lease expires on its own`));
    }
  }

  /** Clears the lease if an operator revoked it from this worker (nothing else), and remembers that it did. */
  private async releaseRevoked(): Promise<void> {
    if ((await this.params.lease.release()) === 'cleared') this.clearedRevoked = true;
  }

  /** No more reads; the batch in hand goes on. */
  private drain(): void {
    if (this.draining) return;
    this.draining = true;
    this.wake?.([]);
    // Breaks a blocked XREAD at once instead of waiting for its timeout.
    this.connection?.disconnect();
  }

  /** No more reads, and no entry of the batch starts any more; retry waits end early. */
  private halt(): void {
    this.drain();
    this.stop.fire();
    void this.redelivery?.stop();
  }

  /** The whole cycle: receive a batch, take it on, repeat until stopped or fenced. */
  private async run(): Promise<void> {
    if (this.parking && !(await this.loadParked())) return;
    this.readFrom(this.cursor);
    while (!this.draining) {
      const received = await this.receive();
      // Only groups with batch handlers pay the extra await.
      const entries = received && received.length > 0 && this.processor.hasBatchHandlers ? await this.fillUp(received) : received;
      if (entries === null || (entries.length > 0 && (await this.takeOn(entries)) === 'end')) return;
    }
  }

  /**
   * The batch read in flight. An empty or failed read starts the next one
   * (after a backoff when it failed) and gives `[]`; null once stopping.
   */
  private async receive(): Promise<Entry[] | null> {
    let entries: Entry[];
    try {
      entries = await this.untilDrained(this.next);
    } catch (error) {
      if (this.draining) return null;
      this.logger.warn(this.record(`read failed (${describeError(error)}); retrying`));
      return (await this.retryRead()) === 'continue' ? [] : null;
    }
    if (this.draining) return null;
    if (entries.length === 0) this.readFrom(this.cursor);
    return entries;
  }

  /**
   * Batch handlers with `maxWaitMs`: a read that brought fewer entries than
   * their `maxSize` is topped up by further blocking reads (XREAD BLOCK with
   * what is left of the wait as its timeout: nothing polls) until the batch
   * is full or the wait is over. The largest `maxSize` and `maxWaitMs` of the
   * batch handlers whose events are in hand apply. Not while recovering (one
   * entry at a time). Null once stopping.
   */
  private async fillUp(entries: Entry[]): Promise<Entry[] | null> {
    if (this.recovery.active) return entries;
    let size = 0;
    let waitMs = 0;
    for (const entry of entries) {
      const batch = this.processor.batchOf(entry);
      if (batch) [size, waitMs] = [Math.max(size, batch.maxSize), Math.max(waitMs, batch.maxWaitMs)];
    }
    const deadline = performance.now() + waitMs;
    let all = entries;
    while (all.length < size) {
      if (this.draining) return null;
      const left = Math.ceil(deadline - performance.now());
      if (left <= 0) break;
      let more: Entry[];
      try {
        more = await this.untilDrained(this.read(all[all.length - 1].offset, size - all.length, left));
      } catch {
        if (this.draining) return null;
        break; // handle what is in hand; the next read meets the trouble and reports it
      }
      if (this.draining) return null;
      if (more.length === 0) break;
      all = all.concat(more);
    }
    return all;
  }

  /** Recovery check, idempotency lookup, then the fetch itself; without either, straight to the fetch (no extra async frame). */
  private takeOn(entries: Entry[]): Promise<Step> {
    if (!this.recovery.active && !this.params.options.enableIdempotency) return this.runFetch(new Fetch(entries, this.fetchContext));
    return this.takeOnChecked(entries);
  }

  private async takeOnChecked(entries: Entry[]): Promise<Step> {
    if (this.recovery.active) {
      const verdict = await this.recovery.countDelivery(entries[0]);
      if (verdict === 'retry') return this.retryRead();
      if (verdict === 'dead-lettered') return this.passOver(entries[0]);
    }
    let alreadyDone: Set<string> | undefined;
    try {
      alreadyDone = this.params.options.enableIdempotency ? await this.doneIds(entries) : undefined;
    } catch (error) {
      this.logger.warn(this.record(`idempotency check failed (${describeError(error)}); retrying`));
      return this.retryRead();
    }
    return this.runFetch(new Fetch(entries, this.fetchContext, alreadyDone));
  }

  private async runFetch(fetched: Fetch): Promise<Step> {
    this.current = fetched;
    const fetchStart = this.cursor;
    this.tally.took(fetchStart, fetched.entries);
    const recovering = this.recovery.active;
    this.recovery.consume(fetched.entries.length);
    this.cursor = fetched.lastOffset;
    // The next read travels while this fetch is handled, sent first, since synchronous handlers would run
    // the whole fetch before it left. But caught up with a fetch of an entry or two (events arriving
    // slowly), that read would only wait at Redis for the next append, and sent first its socket write
    // sits between the fetch's entries (an async handler's first await lets it out): it goes once the
    // fetch is handled, if it was handled whole (else the restart below reads). Only for such short
    // fetches: a longer one means events are arriving faster than a round trip, and a read held back
    // until each fetch ends costs the worker a round trip per fetch (at 35,000 events/s the p99 went
    // from 4 to 22 ms when every caught-up fetch waited).
    const caughtUp = this.reader?.isBehind === false && fetched.entries.length <= READ_AFTER_FETCH_MAX;
    if (!caughtUp) this.readFrom(this.cursor);
    await fetched.run(this.params.options.concurrency);
    if (this.draining) return 'end'; // the stopper commits the low watermark
    if (caughtUp && fetched.complete) this.readFrom(this.cursor);
    const mark = fetched.watermark();
    const committing = this.commitPipelined(mark, fetched.handledIds, recovering);
    if (!(committing === true || (committing !== false && (await committing)))) return 'end';
    this.current = undefined;
    return fetched.complete ? 'continue' : this.restartAt(mark ?? fetchStart);
  }

  /**
   * Loads the partition's parked lines before the first read (entries of a parked key must wait behind
   * it from the first one on), counts the redeliveries a dead owner left running, and arms the
   * redelivery timer. One HGETALL per partition taken; none per batch. False once stopping.
   */
  private async loadParked(): Promise<boolean> {
    const { lines, retryProcessor } = this.parking!;
    const { redis, lease, options, semaphore, stats } = this.params;
    for (;;) {
      try {
        const fields = await redis.client.hgetall(redis.keys.recovery(lease.group, lease.partition));
        const dropped = lines.load(fields);
        if (dropped.length > 0) this.logger.error(this.record(`parked lines it cannot read were dropped: ${dropped.join(', ')}`));
        // Redeliveries left running by a lease of this process that lapsed are no crash (see GroupConsumer.startWorker).
        if (this.params.recovering) lines.countCrashes();
        else lines.clearRunning();
        await this.applyParkedCommands(fields);
        break;
      } catch (error) {
        this.logger.warn(this.record(`could not load the parked lines (${describeError(error)}); retrying`));
        // A hand-back (a drain, which fires no stop) ends the retries too.
        if ((await this.stop.sleep(READ_ERROR_BACKOFF_MS)) || this.draining) return false;
      }
    }
    if (this.draining) return false;
    const inherited = this.parking!.inherited;
    if (inherited) {
      if (lines.size === 0) {
        this.parking = undefined;
        return true;
      }
      this.processor = this.fetchContext.processor = inherited.processor;
      this.fetchContext.parked = true;
      const msg = `${lines.parkedCount} messages parked by members with ordering 'key' or 'unordered' are here: this worker works the partition with ordering 'key' until it lets it go (the later messages of a parked key wait behind it)`;
      this.logger.warn(this.record(msg, { parked: lines.parkedCount }));
    }
    this.redelivery = new ParkedRedelivery({
      lines,
      redis,
      streamKey: this.streamKey,
      origin: this.origin,
      group: lease.group,
      partition: lease.partition,
      processor: this.processor,
      retryProcessor,
      semaphore,
      stop: this.stop,
      stats,
      maxDeliveries: options.maxDeliveries,
      batchSize: options.batchSize,
      concurrency: options.concurrency,
      persist: (handledIds) => this.persistParked(handledIds),
      isDone: options.enableIdempotency ? async (entry) => (await this.doneIds([entry])).has(entry.id) : undefined,
    });
    this.redelivery.schedule();
    return true;
  }

  /**
   * Applies the operators' commands left in the recovery hash (`EventrailAdmin.retryParked`,
   * `giveUpParked`), then removes them: read from `fields`, or from Redis when told of them.
   */
  async applyParkedCommands(fields?: Record<string, string>): Promise<void> {
    const parking = this.parking;
    if (!parking || this.draining) return;
    const { redis, lease } = this.params;
    const hash = redis.keys.recovery(lease.group, lease.partition);
    const commands = ParkedLines.commands(fields ?? (await redis.client.hgetall(hash)));
    // Stopped while they were read: this worker's lines may not be committed any more, so the commands
    // stay in Redis for the next owner (deleted here, they would be lost with the lines they changed).
    if (commands.length === 0 || this.draining) return;
    for (const command of commands) parking.lines.apply(command);
    await redis.client.hdel(hash, ...commands.map((c) => c.field));
    this.redelivery?.schedule();
  }

  /** Writes what changed in the parked lines (and the done-marks of `handledIds`) with a commit, and waits for it. */
  private persistParked(handledIds: readonly string[]): Promise<boolean> {
    if (this.lost || this.released || this.leaving) return Promise.resolve(false);
    if (handledIds.length === 0 && !this.parking?.lines.hasChanges) return Promise.resolve(true);
    this.commits.push(this.lastMark ?? this.committed, handledIds);
    return this.commits.flush();
  }

  /**
   * Queues the commit of `mark` without waiting for it: it travels while the
   * next batch is handled, merged with the next batches' marks while another
   * commit is in flight or was sent less than `COMMIT_SPACING_MS` ago. A
   * fenced verdict aborts the worker (which stops the batch in hand) when it
   * arrives. With `wait` (recovering), the commit lands before the next entry
   * starts. False when the lease was lost.
   */
  private commitPipelined(mark: string | undefined, handledIds: readonly string[], wait: boolean): boolean | Promise<boolean> {
    if (this.lost) return false;
    if (mark !== undefined) {
      this.lastMark = mark;
      this.commits.push(mark, handledIds);
    }
    // While lines are parked, the redelivery timer is set again for the earliest one (this fetch may have parked more).
    if (this.redelivery && this.parking!.lines.size > 0) this.redelivery.schedule();
    return wait ? this.commits.flush() : true;
  }

  /** The entry after the committed offset was dead-lettered unhandled (a crash loop): commit past it. */
  private async passOver(entry: Entry): Promise<Step> {
    this.tally.took(this.cursor, [entry]);
    this.cursor = entry.offset;
    this.recovery.consume(1);
    if (!(await this.commit(entry.offset))) return 'end';
    this.readFrom(this.cursor);
    return 'continue';
  }

  /**
   * An entry could not be finished (its failure could not be recorded): read
   * again from it rather than skipping it, on a fresh connection. Not once
   * draining (a hand-back or stop that came while the fetch's commit was
   * awaited): the drain closed the read connection, and none is opened again.
   */
  private restartAt(offset: string): Promise<Step> {
    if (this.draining) return Promise.resolve('end');
    this.cursor = offset;
    this.connection?.disconnect();
    this.connection = this.params.redis.duplicateForReads();
    return this.retryRead();
  }

  /** Waits the read-error backoff, then reads again from the cursor; `end` when stopped or draining meanwhile. */
  private async retryRead(): Promise<Step> {
    if ((await this.stop.sleep(READ_ERROR_BACKOFF_MS)) || this.draining) return 'end';
    this.readFrom(this.cursor);
    return 'continue';
  }

  /**
   * Event ids of `entries` that idempotency already recorded as done (one round trip per batch), or that
   * an earlier batch of this worker handled and whose commit has not landed yet.
   */
  private async doneIds(entries: Entry[]): Promise<Set<string>> {
    const ids: string[] = [];
    for (const entry of entries) if (!isMalformed(entry) && this.processor.wants(entry)) ids.push(entry.id);
    const done = new Set<string>();
    if (ids.length === 0) return done;
    // Taken before the lookup leaves: a commit queued now may land while it travels, after Redis answered it.
    for (const id of this.commits.pending(ids)) done.add(id);
    const { redis, lease } = this.params;
    const scores = (await redis.client.zmscore(redis.keys.done(lease.group, lease.partition), ...ids)) as Array<string | null>;
    // Marks expire on Redis's clock: compared with this host's, a skewed clock would misjudge them.
    const now = redis.clock.now();
    scores.forEach((score, i) => {
      if (score !== null && Number(score) > now) done.add(ids[i]);
    });
    return done;
  }

  /**
   * `read`'s entries, or none as soon as draining starts. Not a `Promise.race` with a promise that
   * settles on drain: every race leaves a reaction on that promise which holds the race's result, so
   * each batch read stayed reachable until the worker stopped (measured: 861 bytes a batch, 86 MB
   * after 100 000 one-entry batches).
   */
  private untilDrained(read: Promise<Entry[]>): Promise<Entry[]> {
    if (this.draining) {
      // Sent on a connection the drain closed: it fails with "Connection is closed.", which nobody awaits.
      read.catch(() => undefined);
      return Promise.resolve([]);
    }
    return new Promise<Entry[]>((resolve, reject) => {
      this.wake = resolve;
      read.then(resolve, reject);
    });
  }

  /** Starts the next read; one left behind by a stop may reject later, which is expected. */
  private readFrom(after: string): void {
    this.next = this.read(after, this.recovery.readSize(this.readSize));
    this.next.catch(() => undefined);
  }

  private read(after: string, count: number, blockMs = BLOCK_MS): Promise<Entry[]> {
    const connection = this.connection;
    if (!connection) return Promise.resolve([]);
    const { packedBacklogReads: packed, maxReadBytes } = this.params.options;
    this.reader ??= new PartitionReader(this.streamKey, this.origin, {
      packed,
      maxReadBytes,
      group: this.params.lease.group,
      index: this.indexKeys(),
    });
    return this.reader.read(connection, after, count, blockMs);
  }

  /** The keys the reader asks, while behind, where the partition's big entries are (readIndex-3.lua). */
  private indexKeys(): IndexKeys {
    const { keys } = this.params.redis;
    const { partition } = this.params.lease;
    return { stream: this.streamKey, bigEntries: keys.bigEntries(partition), indexedFrom: keys.indexedFrom(partition) };
  }

  /** Commits through the fenced lease; false when the lease was lost or the commit's fate is unknown (the worker then aborts). */
  private async commit(offset: string, doneIds: readonly string[] = []): Promise<boolean> {
    const { options, lease } = this.params;
    let verdict: 'committed' | 'fenced';
    try {
      const parked = this.parking?.lines.takeChanges();
      verdict = await lease.commit(
        offset,
        doneIds,
        options.enableIdempotency ? options.idempotencyTtlMs : 0,
        this.tally.advance(offset),
        parked,
      );
    } catch (error) {
      // Whether it landed is unknown: stop here; the partition is taken again
      // (by this worker too) from whatever offset Redis holds. A stop that gave up on Redis said so already.
      if (!this.leaving)
        this.logger.warn(this.record(`commit of ${offset} failed (${describeError(error)}); dropping the partition`, { offset }));
      this.abort();
      return false;
    }
    if (verdict === 'committed') {
      if (compareStreamIds(offset, this.committed) > 0) this.committed = offset;
      this.params.onCommitted?.(this.partition, this.committed);
      return true;
    }
    this.logger.warn(this.record(`lease was taken over; dropping the partition without committing ${offset}`, { offset }));
    this.abort();
    return false;
  }

  private describe(): string {
    return `Group "${this.params.lease.group}" partition ${this.params.lease.partition}`;
  }

  /** A log line of this partition: `text` after the group and partition, which are fields as well. */
  private record(text: string, fields: LogFields = {}): LogRecord {
    const { group, partition } = this.params.lease;
    return logRecord(`${this.describe()}: ${text}`, { group, partition, ...fields });
  }
}
