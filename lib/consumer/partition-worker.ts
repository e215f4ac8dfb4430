import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import type { ResolvedConsumerOptions } from '../eventrail.options';
import { isMalformed, MalformedEntry, RawEntry, readEntry } from '../log/codec';
import { compareStreamIds } from '../log/stream-id';
import type { EventrailRedis } from '../redis/eventrail-redis';
import { BatchContext, BatchRun } from './batch-run';
import type { MetricsHooks } from '../metrics/eventrail-metrics';
import type { GroupStats } from './group-stats';
import type { MessageProcessor } from './message-processor';
import type { Semaphore } from './semaphore';
import { StopSignal } from './stop-signal';

/** How long an idle read blocks in Redis before it is sent again. */
const BLOCK_MS = 10_000;
const READ_ERROR_BACKOFF_MS = 1_000;

type XReadReply = Array<[string, Array<[string, string[]]>]> | null;

export interface PartitionWorkerParams {
  group: string;
  partition: number;
  /** Lease token `<workerId>:<epoch>` that fences every commit. */
  token: string;
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
}

/**
 * Works one (group, partition) while this process holds its lease: reads a
 * batch from the committed offset on its own blocking connection, prefetches
 * the next batch while handling this one, and commits once per batch through
 * the fenced commit script. Loses the partition at once when a commit or a
 * renewal finds the lease taken over.
 */
export class PartitionWorker {
  private readonly logger = new Logger(PartitionWorker.name);
  private readonly stop = new StopSignal();
  private readonly streamKey: string;
  private connection?: Redis | Cluster;
  private current?: BatchRun;
  private committed: string;
  private loop?: Promise<void>;
  private pendingCommit?: Promise<boolean>;
  private ended?: Promise<void>;
  private lost = false;
  private draining = false;
  /** Settles when draining starts: a read queued on a reconnecting connection is not settled by disconnect(). */
  private readonly drained: Promise<never[]>;
  private onDrain!: () => void;
  private readonly batchContext: BatchContext;

  constructor(private readonly params: PartitionWorkerParams) {
    this.streamKey = params.redis.keys.stream(params.partition);
    this.committed = params.committed;
    this.drained = new Promise((resolve) => (this.onDrain = () => resolve([])));
    const { partition, processor, semaphore, stats, group, metrics } = params;
    this.batchContext = { partition, processor, semaphore, stop: this.stop, stats, group, metrics };
  }

  get partition(): number {
    return this.params.partition;
  }

  get token(): string {
    return this.params.token;
  }

  /** False once the worker was told to stop or lost its lease. */
  get active(): boolean {
    return !this.draining;
  }

  /** The offset this worker last committed (or found when it took the partition). */
  get committedOffset(): string {
    return this.committed;
  }

  /** True when the worker ended because its lease was taken over. */
  get wasLost(): boolean {
    return this.lost;
  }

  start(onEnd: (worker: PartitionWorker) => void): void {
    this.connection = this.params.redis.duplicate();
    this.loop = this.run().catch((error: unknown) => {
      this.logger.error(`${this.describe()} stopped on an unexpected error: ${(error as Error).message}`, (error as Error).stack);
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
    this.ended ??= this.finish(timeoutMs, finishBatch);
    return this.ended;
  }

  /** The lease is gone: stop now, commit nothing, release nothing (it belongs to someone else). */
  abort(): void {
    this.lost = true;
    this.halt();
  }

  private async finish(timeoutMs: number, finishBatch: boolean): Promise<void> {
    if (finishBatch) this.drain();
    else this.halt();
    const loop = this.loop ?? Promise.resolve();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    const finished = await Promise.race([loop.then(() => true), deadline]);
    clearTimeout(timer);
    if (!finished) {
      this.logger.warn(`${this.describe()}: handlers still running after ${timeoutMs} ms; committing what is done`);
      this.halt();
    }
    if (!this.params.redis.isReady()) {
      // Nothing can be committed or released now: the next owner takes over when the lease expires.
      this.logger.warn(`${this.describe()}: Redis is unreachable; leaving without a final commit`);
      return;
    }
    try {
      await this.pendingCommit;
      if (this.lost) return;
      const mark = this.current?.watermark();
      if (mark && compareStreamIds(mark, this.committed) > 0) await this.commit(mark, this.current?.handledIds);
      if (!this.lost) await this.release();
    } catch (error) {
      this.logger.warn(
        `${this.describe()}: could not commit and release on stop (${(error as Error).message}); the lease expires on its own`,
      );
    }
  }

  /** No more reads; the batch in hand goes on. */
  private drain(): void {
    if (this.draining) return;
    this.draining = true;
    this.onDrain();
    // Breaks a blocked XREAD at once instead of waiting for its timeout.
    this.connection?.disconnect();
  }

  /** No more reads, and no entry of the batch starts any more; retry waits end early. */
  private halt(): void {
    this.drain();
    this.stop.fire();
  }

  private async run(): Promise<void> {
    const { options } = this.params;
    let cursor = this.committed;
    // After taking over from a worker that died, entries go one at a time for
    // one batch's length: each is counted in Redis before it starts and
    // committed before the next, so a message that kills every worker that
    // handles it is the one whose count grows, and is dead-lettered unhandled
    // once it reaches maxDeliveries. The happy path counts nothing.
    let recovery = this.params.recovering ? options.batchSize : 0;
    let next = this.prefetch(cursor, recovery > 0 ? 1 : options.batchSize);
    while (!this.draining) {
      let entries: Array<RawEntry | MalformedEntry>;
      try {
        entries = await Promise.race([next, this.drained]);
      } catch (error) {
        if (this.draining) return;
        this.logger.warn(`${this.describe()}: read failed (${(error as Error).message}); retrying`);
        if (await this.stop.sleep(READ_ERROR_BACKOFF_MS)) return;
        next = this.prefetch(cursor, recovery > 0 ? 1 : options.batchSize);
        continue;
      }
      if (this.draining) return;
      if (entries.length === 0) {
        next = this.prefetch(cursor, recovery > 0 ? 1 : options.batchSize);
        continue;
      }
      if (recovery > 0) {
        const verdict = await this.countDelivery(entries[0]);
        if (verdict === 'retry') {
          if (await this.stop.sleep(READ_ERROR_BACKOFF_MS)) return;
          next = this.prefetch(cursor, 1);
          continue;
        }
        if (verdict === 'dead-lettered') {
          cursor = entries[0].offset;
          recovery--;
          if (!(await this.commit(cursor))) return;
          next = this.prefetch(cursor, recovery > 0 ? 1 : options.batchSize);
          continue;
        }
      }
      let alreadyDone: Set<string> | undefined;
      try {
        alreadyDone = options.enableIdempotency ? await this.doneIds(entries) : undefined;
      } catch (error) {
        this.logger.warn(`${this.describe()}: idempotency check failed (${(error as Error).message}); retrying`);
        if (await this.stop.sleep(READ_ERROR_BACKOFF_MS)) return;
        next = this.prefetch(cursor, recovery > 0 ? 1 : options.batchSize);
        continue;
      }
      const batch = new BatchRun(entries, { ...this.batchContext, alreadyDone });
      this.current = batch;
      const batchStart = cursor;
      cursor = batch.lastOffset;
      const recovering = recovery > 0;
      recovery = Math.max(0, recovery - entries.length);
      next = this.prefetch(cursor, recovery > 0 ? 1 : options.batchSize); // the next batch travels while this one is handled
      await batch.run(options.concurrency);
      if (this.draining) return; // the stopper commits the low watermark
      const mark = batch.watermark();
      // The commit travels while the next batch is handled; its verdict is
      // read before the next commit is sent, so a fenced worker stops within a
      // batch. While recovering, each commit lands before the next entry starts.
      if (this.pendingCommit && !(await this.pendingCommit)) return;
      this.pendingCommit = undefined;
      if (mark) this.pendingCommit = this.commit(mark, batch.handledIds);
      if (recovering && this.pendingCommit && !(await this.pendingCommit)) return;
      this.current = undefined;
      if (!batch.complete) {
        // An entry could not be finished (its failure could not be recorded):
        // read again from it rather than skipping it.
        cursor = mark ?? batchStart;
        this.connection?.disconnect();
        this.connection = this.params.redis.duplicate();
        if (await this.stop.sleep(READ_ERROR_BACKOFF_MS)) return;
        next = this.prefetch(cursor, options.batchSize);
      }
    }
  }

  /**
   * Recovery path: counts this delivery of `entry`; at `maxDeliveries` the
   * entry has killed enough workers and goes to the dead-letter stream instead.
   */
  private async countDelivery(entry: RawEntry | MalformedEntry): Promise<'handle' | 'dead-lettered' | 'retry'> {
    const { redis, group, partition, options, processor, stats } = this.params;
    try {
      const deliveries = await redis.client.eventrailMarkDelivery(redis.keys.recovery(group, partition), entry.offset);
      if (deliveries < options.maxDeliveries) return 'handle';
      await processor.giveUpCrashLoop(entry, partition, deliveries);
      stats.deadLettered++;
      return 'dead-lettered';
    } catch (error) {
      this.logger.warn(`${this.describe()}: could not count the delivery of ${entry.offset} (${(error as Error).message}); retrying`);
      return 'retry';
    }
  }

  /** Event ids of `entries` that idempotency already recorded as done: one round trip per batch. */
  private async doneIds(entries: Array<RawEntry | MalformedEntry>): Promise<Set<string>> {
    const ids: string[] = [];
    for (const entry of entries) if (!isMalformed(entry) && this.params.processor.wants(entry)) ids.push(entry.id);
    const done = new Set<string>();
    if (ids.length === 0) return done;
    const { redis, group, partition } = this.params;
    const scores = (await redis.client.zmscore(redis.keys.done(group, partition), ...ids)) as Array<string | null>;
    const now = Date.now();
    scores.forEach((score, i) => {
      if (score !== null && Number(score) > now) done.add(ids[i]);
    });
    return done;
  }

  /** Starts a read; a read left behind by a stop may reject later, which is expected. */
  private prefetch(after: string, count: number): Promise<Array<RawEntry | MalformedEntry>> {
    const pending = this.read(after, count);
    pending.catch(() => undefined);
    return pending;
  }

  private async read(after: string, count: number): Promise<Array<RawEntry | MalformedEntry>> {
    const connection = this.connection;
    if (!connection) return [];
    const reply = (await connection.xread('COUNT', count, 'BLOCK', BLOCK_MS, 'STREAMS', this.streamKey, after)) as XReadReply;
    if (!reply || reply.length === 0) return [];
    const raw = reply[0][1];
    const entries = new Array<RawEntry | MalformedEntry>(raw.length);
    for (let i = 0; i < raw.length; i++) entries[i] = readEntry(raw[i][0], raw[i][1]);
    return entries;
  }

  /** Commits through the fencing script; false when the lease was lost (the worker then aborts). */
  private async commit(offset: string, doneIds: readonly string[] = []): Promise<boolean> {
    const { redis, options, token, group, partition } = this.params;
    const markTtl = options.enableIdempotency ? options.idempotencyTtlMs : 0;
    let result: number;
    try {
      result = await redis.client.eventrailCommitOffset(
        this.leaseKey(),
        redis.keys.offset(group, partition),
        redis.keys.done(group, partition),
        token,
        offset,
        options.lockTtlMs,
        markTtl,
        ...(markTtl > 0 ? doneIds : []),
      );
    } catch (error) {
      // Whether it landed is unknown: stop here; the partition is taken again
      // (by this worker too) from whatever offset Redis holds.
      this.logger.warn(`${this.describe()}: commit of ${offset} failed (${(error as Error).message}); dropping the partition`);
      this.abort();
      return false;
    }
    if (result === 1) {
      if (compareStreamIds(offset, this.committed) > 0) this.committed = offset;
      return true;
    }
    this.logger.warn(`${this.describe()}: lease was taken over; dropping the partition without committing ${offset}`);
    this.abort();
    return false;
  }

  private release(): Promise<number> {
    const { redis, group, partition, token } = this.params;
    const epoch = token.slice(token.lastIndexOf(':') + 1);
    return redis.client.eventrailReleaseLease(this.leaseKey(), redis.keys.recovery(group, partition), token, epoch);
  }

  private leaseKey(): string {
    return this.params.redis.keys.lease(this.params.group, this.params.partition);
  }

  private describe(): string {
    return `Group "${this.params.group}" partition ${this.params.partition}`;
  }
}
