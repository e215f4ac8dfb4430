import { Logger } from '@nestjs/common';
import { isMalformed, MalformedEntry, RawEntry } from '../../wire/codec';
import type { MetricsHooks } from '../../metrics/eventrail-metrics';
import type { GroupStats } from './group-stats';
import { formUnits, type Route, type Unit } from '../handling/batch-units';
import type { BatchBinding } from '../handling/group-plan';
import type { MessageProcessor } from '../handling/message-processor';
import { HANDLED, PARKED, type Outcome } from '../handling/outcome';
import type { Semaphore } from '../../util/semaphore';
import type { StopSignal } from '../../util/stop-signal';
import { describeError, errorStack } from '../../util/describe-error';
import { logRecord } from '../../util/log-record';

type Entry = RawEntry | MalformedEntry;

const NO_IDS: readonly string[] = Object.freeze([]);

/** What every fetch of one partition worker shares. */
export interface FetchContext {
  partition: number;
  processor: MessageProcessor;
  semaphore: Semaphore;
  stop: StopSignal;
  stats: GroupStats;
  group: string;
  metrics: MetricsHooks;
  /** True with `'key'` ordering: an entry whose key is parked in the partition is parked behind it, not run. */
  parked: boolean;
}

/**
 * Handles one fetch: the entries one read brought from a partition. Entries with the same key (and all
 * keyless entries) run one after another in stream order; different keys run
 * side by side up to the group's concurrency. A done flag per entry gives the
 * low watermark: the offset before the first entry not yet done, which is what
 * may be committed when a stop cuts the fetch short. (A batch handler's
 * batches form within a fetch: see `runUnits`.)
 */
export class Fetch {
  private static readonly logger = new Logger(Fetch.name);
  private readonly done: Uint8Array;
  private firstPending = 0;
  /** Event ids handled in this fetch, for the idempotency done-marks. */
  private handled?: string[];

  constructor(
    readonly entries: readonly Entry[],
    /** Shared by every fetch of the worker: not copied per fetch. */
    private readonly context: FetchContext,
    /**
     * With idempotency on: ids already recorded as done (checked once per fetch).
     * Entries with these ids, or with the id of an entry handled earlier in this
     * fetch, are skipped; handled ids are collected for the done-marks.
     */
    private readonly alreadyDone?: Set<string>,
  ) {
    this.done = new Uint8Array(entries.length);
  }

  /** Event ids handled in this fetch, for the idempotency done-marks (none without idempotency). */
  get handledIds(): readonly string[] {
    return this.handled ?? NO_IDS;
  }

  get lastOffset(): string {
    return this.entries[this.entries.length - 1].offset;
  }

  /** Offset up to which every entry is done, or undefined when the first one is not. */
  watermark(): string | undefined {
    while (this.firstPending < this.entries.length && this.done[this.firstPending]) this.firstPending++;
    return this.firstPending === 0 ? undefined : this.entries[this.firstPending - 1].offset;
  }

  get complete(): boolean {
    return this.watermark() === this.lastOffset;
  }

  /** Resolves when every entry is done, or has been left undone because of a stop or a failure. */
  run(concurrency: number): Promise<void> {
    if (this.context.processor.hasBatchHandlers) return this.runUnits(concurrency);
    return concurrency === 1 ? this.runInOrder() : this.runByKey();
  }

  /**
   * A group with batch handlers: the entries are cut into units (see
   * `formUnits`), a batch handler's call over consecutive entries or a single
   * entry. With concurrency 1 the units run in order; above it, a unit starts
   * once every earlier unit sharing a key with it is done (keyless entries
   * share one key), so per-key order holds and units of disjoint keys run side
   * by side.
   */
  private async runUnits(concurrency: number): Promise<void> {
    const units = formUnits(this.routes());
    if (concurrency === 1) {
      for (const unit of units) if (!(await this.runUnit(unit))) return;
      return;
    }
    const tails = new Map<string, Promise<boolean>>();
    const tasks: Array<Promise<boolean>> = [];
    for (const unit of units) {
      const keys = this.keysOf(unit);
      const before = [...keys].flatMap((key) => tails.get(key) ?? []);
      const task = before.length === 0 ? this.runUnit(unit) : Promise.all(before).then((oks) => oks.every(Boolean) && this.runUnit(unit));
      for (const key of keys) tails.set(key, task);
      tasks.push(task);
    }
    await Promise.all(tasks);
  }

  /** How each entry runs; entries passed over, and duplicates known before the fetch, are done here. */
  private routes(): Array<Route<BatchBinding>> {
    const { processor } = this.context;
    const { alreadyDone } = this;
    const seen = new Set<string>();
    return this.entries.map((entry, i) => {
      if (!processor.wants(entry)) {
        this.passOver(i);
        return 'skip';
      }
      const batch = processor.batchOf(entry);
      if (!batch || isMalformed(entry)) return 'single';
      if (!alreadyDone) return batch;
      if (this.isDuplicate(i)) return 'skip';
      // The same id again in this fetch: it runs on its own, after the first, which may have marked it done.
      if (seen.has(entry.id)) return 'single';
      seen.add(entry.id);
      return batch;
    });
  }

  private keysOf(unit: Unit<BatchBinding>): Set<string> {
    const keys = new Set<string>();
    for (const index of unit.indexes) {
      const entry = this.entries[index];
      // A malformed entry has no trustworthy key: it waits for nobody.
      if (!isMalformed(entry)) keys.add(entry.key ?? '');
    }
    return keys;
  }

  private runUnit(unit: Unit<BatchBinding>): Promise<boolean> {
    return unit.batch ? this.runBatchUnit(unit.indexes, unit.batch) : this.runOne(unit.indexes[0]);
  }

  /** One batch handler call over `indexes` (retries and the split included), under one permit. */
  private async runBatchUnit(all: number[], batch: BatchBinding): Promise<boolean> {
    const { processor, semaphore, stop, partition, metrics } = this.context;
    // Messages of a parked key wait behind it; the rest of the batch goes on.
    const indexes = this.context.parked ? all.filter((i) => !this.parkedBehind(i)) : all;
    if (indexes.length === 0) return true;
    if (!semaphore.tryAcquire()) await semaphore.acquire();
    const started = metrics.wantsDuration ? performance.now() : 0;
    let outcomes: Outcome[];
    try {
      if (stop.stopped) return false;
      outcomes = await processor.processBatch(
        indexes.map((i) => this.entries[i] as RawEntry),
        batch,
        partition,
        stop,
      );
    } catch (error) {
      this.reportFailure(indexes[0], error);
      return false;
    } finally {
      semaphore.release();
    }
    let done = true;
    indexes.forEach((index, i) => (done = this.settle(index, outcomes[i], started) && done));
    return done;
  }

  private async runInOrder(): Promise<void> {
    const { entries } = this;
    const { processor, semaphore, stop, partition } = this.context;
    for (let i = 0; i < entries.length; i++) {
      if (!processor.wants(entries[i])) {
        this.passOver(i);
        continue;
      }
      if (this.isDuplicate(i) || this.parkedBehind(i)) continue;
      // Inlined runOne: this loop is the drain hot path, one frame per entry less.
      if (!semaphore.tryAcquire()) await semaphore.acquire();
      const started = this.context.metrics.wantsDuration ? performance.now() : 0;
      let outcome: Outcome;
      try {
        if (stop.stopped) return;
        const result = processor.process(entries[i], partition, stop);
        outcome = typeof result === 'number' ? result : await result;
      } catch (error) {
        this.reportFailure(i, error);
        return;
      } finally {
        semaphore.release();
      }
      if (!this.settle(i, outcome, started)) return;
    }
  }

  private async runByKey(): Promise<void> {
    const tails = new Map<string, Promise<boolean>>();
    const tasks: Array<Promise<boolean>> = [];
    for (let i = 0; i < this.entries.length; i++) {
      const entry = this.entries[i];
      if (!this.context.processor.wants(entry)) {
        this.passOver(i);
        continue;
      }
      // A malformed entry has no trustworthy key: it waits for nobody.
      const chain = isMalformed(entry) ? undefined : (entry.key ?? '');
      const previous = chain === undefined ? undefined : tails.get(chain);
      // An entry starts only after the previous one of its key is done; if that
      // one was left undone, so is everything after it.
      const task = previous ? previous.then((ok) => ok && this.runOne(i)) : this.runOne(i);
      if (chain !== undefined) tails.set(chain, task);
      tasks.push(task);
    }
    await Promise.all(tasks);
  }

  private async runOne(index: number): Promise<boolean> {
    if (this.isDuplicate(index) || this.parkedBehind(index)) return true;
    const { processor, semaphore, stop, partition } = this.context;
    if (!semaphore.tryAcquire()) await semaphore.acquire();
    const started = this.context.metrics.wantsDuration ? performance.now() : 0;
    try {
      if (stop.stopped) return false;
      return this.settle(index, await processor.process(this.entries[index], partition, stop), started);
    } catch (error) {
      this.reportFailure(index, error);
      return false;
    } finally {
      semaphore.release();
    }
  }

  /** Records an outcome; false when the entry is not done (the run stops there). */
  private settle(index: number, outcome: Outcome, started: number): boolean {
    if (!outcome) return false;
    this.done[index] = 1;
    const { stats, metrics } = this.context;
    const { alreadyDone } = this;
    if (outcome === PARKED) {
      stats.parked = (stats.parked ?? 0) + 1;
    } else if (outcome === HANDLED) {
      stats.handled++;
      if (metrics.wantsDuration) {
        metrics.emit('onMessageProcessed', this.context.group, (this.entries[index] as RawEntry).event, performance.now() - started);
      }
      if (alreadyDone) {
        const id = (this.entries[index] as RawEntry).id;
        (this.handled ??= []).push(id);
        alreadyDone.add(id);
      }
    } else {
      stats.deadLettered++;
    }
    return true;
  }

  /** With idempotency on, an entry whose event id is already done is skipped without a call. */
  private isDuplicate(index: number): boolean {
    const { stats, metrics } = this.context;
    const { alreadyDone } = this;
    const entry = this.entries[index];
    if (!alreadyDone || isMalformed(entry) || !alreadyDone.has(entry.id)) return false;
    this.done[index] = 1;
    stats.skippedDuplicates++;
    metrics.emit('onMessageSkipped', this.context.group, 'duplicate', entry.offset);
    return true;
  }

  /** With `'key'` ordering, an entry whose key is parked: parked behind it, done here without a call. */
  private parkedBehind(index: number): boolean {
    if (!this.context.parked || !this.context.processor.parkedBehind(this.entries[index], this.context.partition)) return false;
    this.done[index] = 1;
    const { stats } = this.context;
    stats.parked = (stats.parked ?? 0) + 1;
    return true;
  }

  /** An entry this group has no handler for: done without a call. */
  private passOver(index: number): void {
    this.done[index] = 1;
    const { metrics, group } = this.context;
    if (metrics.wantsSkips) metrics.emit('onMessageSkipped', group, 'no-handler', this.entries[index].offset);
  }

  private reportFailure(index: number, error: unknown): void {
    const entry = this.entries[index];
    const { group, partition } = this.context;
    Fetch.logger.error(
      logRecord(`Could not finish entry ${entry.offset} of group "${group}" partition ${partition}: ${describeError(error)}`, {
        group,
        partition,
        eventId: isMalformed(entry) ? undefined : entry.id,
        event: isMalformed(entry) ? undefined : entry.event,
        offset: entry.offset,
        stack: errorStack(error),
      }),
    );
  }
}
