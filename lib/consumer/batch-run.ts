import { Logger } from '@nestjs/common';
import { isMalformed, MalformedEntry, RawEntry } from '../log/codec';
import type { MessageProcessor } from './message-processor';
import type { Semaphore } from './semaphore';
import type { StopSignal } from './stop-signal';

type Entry = RawEntry | MalformedEntry;

/**
 * Handles one fetched batch of a partition. Entries with the same key (and all
 * keyless entries) run one after another in stream order; different keys run
 * side by side up to the group's concurrency. A done flag per entry gives the
 * low watermark: the offset before the first entry not yet done, which is what
 * may be committed when a stop cuts the batch short.
 */
export class BatchRun {
  private static readonly logger = new Logger(BatchRun.name);
  private readonly done: Uint8Array;
  private firstPending = 0;

  constructor(
    readonly entries: readonly Entry[],
    private readonly partition: number,
    private readonly processor: MessageProcessor,
    private readonly semaphore: Semaphore,
    private readonly stop: StopSignal,
  ) {
    this.done = new Uint8Array(entries.length);
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
    return concurrency === 1 ? this.runInOrder() : this.runByKey();
  }

  private async runInOrder(): Promise<void> {
    const { entries, processor, semaphore, stop, done, partition } = this;
    for (let i = 0; i < entries.length; i++) {
      if (!processor.wants(entries[i])) {
        done[i] = 1;
        continue;
      }
      // Inlined runOne: this loop is the drain hot path, one frame per entry less.
      if (!semaphore.tryAcquire()) await semaphore.acquire();
      let ok: boolean;
      try {
        if (stop.stopped) return;
        const result = processor.process(entries[i], partition, stop);
        ok = typeof result === 'boolean' ? result : await result;
      } catch (error) {
        this.reportFailure(i, error);
        return;
      } finally {
        semaphore.release();
      }
      if (!ok) return;
      done[i] = 1;
    }
  }

  private async runByKey(): Promise<void> {
    const tails = new Map<string, Promise<boolean>>();
    const tasks: Array<Promise<boolean>> = [];
    for (let i = 0; i < this.entries.length; i++) {
      const entry = this.entries[i];
      if (!this.processor.wants(entry)) {
        this.done[i] = 1;
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

  private reportFailure(index: number, error: unknown): void {
    BatchRun.logger.error(
      `Could not finish entry ${this.entries[index].offset} of partition ${this.partition}: ${(error as Error).message}`,
      (error as Error).stack,
    );
  }

  private async runOne(index: number): Promise<boolean> {
    if (!this.semaphore.tryAcquire()) await this.semaphore.acquire();
    try {
      if (this.stop.stopped) return false;
      const ok = await this.processor.process(this.entries[index], this.partition, this.stop);
      if (ok) this.done[index] = 1;
      return ok;
    } catch (error) {
      this.reportFailure(index, error);
      return false;
    } finally {
      this.semaphore.release();
    }
  }
}
