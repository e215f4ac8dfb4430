import { Logger } from '@nestjs/common';
import type { MetricsHooks } from '../../metrics/eventrail-metrics';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import { describeError } from '../../util/describe-error';
import { logRecord } from '../../util/log-record';

/** What the last loss of the log looked like, as this process found it. */
export interface LogLoss {
  /** When this process found it (its own clock). */
  at: Date;
  /** The log's `createdAt` this process knew (ms, as `P:meta` held it). */
  knewCreatedAt: string;
  /** What `P:meta` held when it found the loss: null when it was gone. */
  foundCreatedAt: string | null;
  /** The groups this process worked then, which resume from the start of the new log. */
  groups: string[];
  /** How many losses this process has found since it started. */
  count: number;
}

/** What this process knows of a group's partitions: their offsets existed in Redis at this generation or later. */
interface HeldGroup {
  generation: number;
  partitions: Set<number>;
}

/**
 * Notices that Redis came back without the log (a restart without
 * persistence, a FLUSHALL, a failover to an empty replica) and keeps the
 * groups of this process from skipping events because of it.
 *
 * A committed offset is never deleted while its group lives (a group
 * delete bumps the generation), so an offset that is missing where this
 * process had one means the log went with it. A worker that takes such a
 * partition again must not initialise it at the end (`fromEnd`, `fromId`,
 * `fromTime`): what the new log received meanwhile would be skipped. It starts
 * at the start of the new log instead. Which offsets this process knew is kept
 * here, per worker (module instance), not in Redis: that is what vanished.
 *
 * The loss itself is read from the log's metadata (`P:meta`): its `createdAt`
 * is written once, when the log is created, so a different one or none means
 * the log is not the one this process started on. Then this says so at error
 * level, counts it (`onLogLost`, `eventrail_log_lost_total`), keeps it for the
 * health check, and writes the metadata again, so a process configured with
 * another partition count is refused again.
 */
export class LogLossWatch {
  private static readonly byWorker = new Map<string, LogLossWatch>();
  private readonly logger = new Logger(LogLossWatch.name);
  private readonly held = new Map<string, HeldGroup>();
  /** The log's `createdAt` as this process first read it; undefined until read, null when it had none. */
  private createdAt: string | null | undefined;
  private lastLoss?: LogLoss;
  private checking?: Promise<void>;

  private constructor(private readonly prefix: string) {}

  /**
   * The watch of worker `workerId` (one per module instance: an app closed and
   * started again in the same process, as tests do on a flushed Redis, starts
   * with a watch that knows nothing).
   */
  static of(workerId: string, prefix: string): LogLossWatch {
    let watch = LogLossWatch.byWorker.get(workerId);
    if (!watch) {
      watch = new LogLossWatch(prefix);
      LogLossWatch.byWorker.set(workerId, watch);
    }
    return watch;
  }

  /** The last loss of the log that worker `workerId` found, if any (for the health check). */
  static lastLossOf(workerId: string): LogLoss | undefined {
    return LogLossWatch.byWorker.get(workerId)?.lastLoss;
  }

  /**
   * Before `group` takes `partitions`: the ones whose offset, if missing,
   * must start at the start of the log, because this process knew it
   * existed (at `generation` or a later one, which only a loss takes back).
   * Reads the log's metadata when this process knew any offset of the group
   * (one command per acquire, on the rebalance path only).
   */
  async mustStartAtStart(
    redis: EventrailRedis,
    group: string,
    partitions: readonly number[],
    generation: string,
    metrics?: MetricsHooks,
  ): Promise<Set<number>> {
    const known = this.held.get(group);
    if (!known) return new Set();
    // A later generation: the group was deleted and joined again, so it starts as a new group does.
    if (Number(generation) > known.generation) {
      this.held.delete(group);
      return new Set();
    }
    known.generation = Number(generation);
    await this.checkLog(redis, metrics);
    return new Set(partitions.filter((p) => known.partitions.has(p)));
  }

  /** `group` (at `generation`) now has offsets in Redis for `partitions`: this process took them. */
  taken(group: string, generation: string, partitions: readonly number[]): void {
    if (partitions.length === 0) return;
    const known = this.held.get(group) ?? { generation: Number(generation), partitions: new Set<number>() };
    for (const p of partitions) known.partitions.add(p);
    this.held.set(group, known);
  }

  /** Reads the log's `createdAt` once, after this worker's first acquire: what a later change or absence is judged against. */
  async remember(redis: EventrailRedis): Promise<void> {
    if (this.createdAt !== undefined) return;
    this.createdAt = await redis.client.hget(redis.keys.meta, 'createdAt');
  }

  /** One check at a time: groups taking partitions at once would each find the same loss. */
  private checkLog(redis: EventrailRedis, metrics?: MetricsHooks): Promise<void> {
    this.checking ??= this.checkLogNow(redis, metrics).finally(() => (this.checking = undefined));
    return this.checking;
  }

  private async checkLogNow(redis: EventrailRedis, metrics?: MetricsHooks): Promise<void> {
    let found: string | null;
    try {
      found = await redis.client.hget(redis.keys.meta, 'createdAt');
    } catch {
      return; // Redis is away: the acquire that follows fails too, and the next one asks again.
    }
    if (this.createdAt === undefined || this.createdAt === null) {
      this.createdAt = found;
      return;
    }
    if (found === this.createdAt) return;
    const knew = this.createdAt;
    // Every group this process worked had offsets in the old log: all its partitions start at the start of the new one.
    for (const known of this.held.values()) for (let p = 0; p < redis.keys.partitions; p++) known.partitions.add(p);
    this.createdAt = await this.restoreMeta(redis).catch((error: unknown) => {
      this.logger.error(
        logRecord(
          `Log "${this.prefix}": could not write the log's metadata again (${describeError(error)}); trying at the next acquire`,
          {},
        ),
      );
      return undefined;
    });
    this.report(knew, found, metrics);
  }

  /**
   * Writes the partition count and a new `createdAt` where they are missing,
   * so a process with another count is refused again (`PartitionMismatchError`);
   * says so when another process wrote another count first.
   */
  private async restoreMeta(redis: EventrailRedis): Promise<string | null> {
    const { client, keys } = redis;
    await client.hsetnx(keys.meta, 'partitions', String(keys.partitions));
    await client.hsetnx(keys.meta, 'createdAt', String(Date.now()));
    const [partitions, createdAt] = await client.hmget(keys.meta, 'partitions', 'createdAt');
    if (Number(partitions) !== keys.partitions) {
      const msg =
        `Log "${this.prefix}": its metadata now says ${partitions} partitions, written by a process that started on the empty ` +
        `Redis; this process works ${keys.partitions}. Keys map to other partitions there: stop the processes with the other count.`;
      this.logger.error(logRecord(msg, { recordedPartitions: partitions, partitions: keys.partitions }));
    }
    return createdAt;
  }

  private report(knew: string, found: string | null, metrics?: MetricsHooks): void {
    const groups = [...this.held.keys()].sort();
    this.lastLoss = { at: new Date(), knewCreatedAt: knew, foundCreatedAt: found, groups, count: (this.lastLoss?.count ?? 0) + 1 };
    const now = found === null ? 'its metadata is gone' : `its metadata says it was created at ${found}`;
    const msg =
      `Log "${this.prefix}" vanished: Redis came back without it (it was created at ${knew}; ${now}): a restart without ` +
      'persistence, a FLUSHALL or a failover to an empty replica. Events and offsets from before are gone. Groups ' +
      `${groups.map((g) => `"${g}"`).join(', ')} resume from the start of the new log, so nothing published since is skipped. ` +
      'Turn on appendonly (see Persistence in docs/operations/runbook.md).';
    this.logger.error(logRecord(msg, { groups, knewCreatedAt: knew, foundCreatedAt: found }));
    metrics?.emit('onLogLost');
  }
}
