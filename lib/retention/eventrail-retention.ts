import { Inject, Injectable, Logger, OnApplicationBootstrap, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { RedisFullError } from '../errors/redis-full.error';
import { GroupFactsReader } from '../admin/group-facts.reader';
import { guardedProgress } from '../admin/guarded-progress';
import type { RetentionOperations } from '../admin/admin.types';
import { EventrailRedis } from '../redis/eventrail-redis';
import { describeError } from '../util/describe-error';
import { redactUrlsIn } from '../util/redact-url';
import type { ArchiveSink } from './archive/archive-sink';
import { createArchiveSink } from './create-archive-sink';
import { ArchiveRestorer } from './archive-restorer';
import { RetentionCycle } from './retention-cycle';
import { RetentionLock } from './retention-lock';
import type { ResolvedRetentionOptions } from './retention.options';
import { RetentionJob, RetentionScheduler } from './retention.scheduler';
import type { ArchiveObject, ArchiveSource, ProgressListener, RetentionRunResult } from '../admin/operations.types';
import type { ResolvedTracingOptions } from '../tracing/tracing.options';

/** TTL of the fleet-wide retention lock; extended after every partition and archive object. */
const LOCK_TTL_MS = 60_000;

/** What retention reads of the module options (`ResolvedEventrailOptions` has it). */
interface RetentionModuleOptions {
  prefix: string;
  retention?: ResolvedRetentionOptions;
  tracing?: ResolvedTracingOptions;
}

/**
 * Scheduled retention (module option `retention`): registers the cycle in the
 * app's `SchedulerRegistry` when `retention.enabled`, runs one cycle at a time
 * in the fleet, and restores archived entries for one group.
 */
@Injectable()
export class EventrailRetention implements OnModuleInit, OnApplicationBootstrap, OnModuleDestroy, RetentionOperations {
  private readonly logger = new Logger(EventrailRetention.name);
  private scheduler?: RetentionScheduler;
  private job?: RetentionJob;
  private sink?: ArchiveSink;
  private cycle?: RetentionCycle;
  private inFlight?: Promise<RetentionRunResult>;
  private stopping = false;
  private readonly facts: GroupFactsReader;

  constructor(
    private readonly redis: EventrailRedis,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: RetentionModuleOptions,
    private readonly moduleRef: ModuleRef,
  ) {
    this.facts = new GroupFactsReader(redis);
  }

  /** The job's name in `SchedulerRegistry`. */
  get jobName(): string {
    return `eventrail-retention:${this.options.prefix}`;
  }

  async onModuleInit(): Promise<void> {
    const retention = this.options.retention;
    if (!retention) return;
    // A missing scheduler or archive package fails startup, not the first cycle an hour later.
    if (retention.enabled) this.scheduler = await RetentionScheduler.resolve(this.moduleRef);
    if (retention.archive) this.sink = await createArchiveSink(retention.archive);
    this.cycle = new RetentionCycle(this.redis, this.facts, retention, this.sink);
  }

  onApplicationBootstrap(): void {
    const retention = this.options.retention;
    if (!retention || !this.scheduler) return;
    this.job = this.scheduler.schedule(this.jobName, retention.schedule, () => this.tick());
    const every = retention.schedule.kind === 'interval' ? `every ${retention.schedule.ms} ms` : `on "${retention.schedule.expression}"`;
    this.logger.log(`Retention scheduled ${every} as "${this.jobName}"${this.sink ? `, archiving to ${redactUrlsIn(this.sink.id)}` : ''}`);
  }

  async onModuleDestroy(): Promise<void> {
    this.stopping = true;
    this.job?.stop();
    this.job = undefined;
    await this.inFlight?.catch(() => undefined);
    this.sink?.close();
  }

  /**
   * Runs one cycle now (after the one in progress in this process, if any) and
   * reports per partition what was archived and trimmed, and which groups were
   * stale. Resolves with `ran: false` when another instance holds the lock.
   */
  async runOnce({ onProgress }: { onProgress?: ProgressListener } = {}): Promise<RetentionRunResult> {
    const cycle = this.cycle;
    if (!cycle) throw new InvalidOptionError('retention', undefined, 'retention options in EventrailModule.forRoot to run a cycle');
    const listener = guardedProgress(onProgress, 'retention run');
    const previous = this.inFlight;
    const run = (async () => {
      await previous?.catch(() => undefined);
      return this.runLocked(cycle, listener);
    })();
    this.inFlight = run;
    try {
      return await run;
    } catch (error) {
      throw RedisFullError.from('run retention', error);
    } finally {
      if (this.inFlight === run) this.inFlight = undefined;
    }
  }

  /**
   * Appends archived entries back to the log for `group` alone (the other
   * groups skip them), keeping their event id, key, publish time, data and
   * headers. Returns how many were appended. Objects are restored one after the
   * other; an unreadable one stops the restore at it.
   */
  async restoreArchive(group: string, source: ArchiveSource, { onProgress }: { onProgress?: ProgressListener } = {}): Promise<number> {
    const restorer = this.restorer();
    const listener = guardedProgress(onProgress, 'archive restore');
    await this.facts.assertExists(group);
    // Appending needs memory: a full Redis refuses it (an archive object stops the restore at it).
    return restorer.restore(group, source, listener).catch((error: unknown) => {
      throw RedisFullError.from('restore an archive', error);
    });
  }

  /** Archive objects written for this log, optionally of one partition, by partition and id. */
  listArchives({ partition }: { partition?: number } = {}): Promise<ArchiveObject[]> {
    return this.restorer().list(partition);
  }

  private tick(): void {
    if (this.stopping) return;
    if (this.inFlight) {
      this.logger.debug('Retention: the previous cycle is still running; skipping this tick');
      return;
    }
    void this.runOnce().catch((error: unknown) => this.logger.error(`Retention cycle failed: ${describeError(error)}`));
  }

  private async runLocked(cycle: RetentionCycle, onProgress?: ProgressListener): Promise<RetentionRunResult> {
    await this.redis.whenPrepared();
    const lock = new RetentionLock(this.redis, LOCK_TTL_MS);
    if (!(await lock.acquire())) {
      this.logger.debug('Retention: another instance is running a cycle; skipping');
      return { ran: false, staleGroups: [], partitions: [], deadLetters: [] };
    }
    try {
      return { ran: true, ...(await cycle.run(lock, () => this.stopping, onProgress)) };
    } finally {
      await lock.release().catch((error: unknown) => this.logger.warn(`Retention lock not released (${describeError(error)}); it expires`));
    }
  }

  private restorer(): ArchiveRestorer {
    if (!this.sink) throw new InvalidOptionError('retention.archive', undefined, 'an archive (fs or s3) to list and restore from');
    return new ArchiveRestorer(this.redis, this.sink, undefined, this.options.tracing);
  }
}
