import { EventrailPublisher, PublishInput, PublishResult, RedisUnavailableError } from '../../../lib';
import { EVENTS } from './chaos-protocol';
import { entryRef } from './log-checks';

export interface ProducerLimits {
  keys: number;
  /** Events per `publishMany`. */
  batch: number;
  /** Stop after this many accepted events (and once `keepGoingWhile`'s condition is false)... */
  target: number;
  /** ...or after this long, whichever comes first. */
  maxMs: number;
  /** Pause between batches: paces the producer, nothing waits on it. */
  paceMs: number;
}

/** The pause after a rejected batch, so an outage is not a busy loop. */
const AFTER_REJECT_MS = 50;

/**
 * Publishes keyed `chaos.tick` events ({ seq }, seq counting per key) in
 * batches until it has enough accepted events or runs out of time.
 *
 * Accepted means `publishMany` resolved: those events are in the log, at the
 * offsets it returned. A batch that rejects (Redis is down) is not retried:
 * its events are skipped, their seqs are not reused, and none of them counts
 * as accepted, although Redis may have appended some of them before it died
 * (those still count as log entries, which the consumers must handle too).
 */
export class KeyedProducer {
  /** Accepted events by `partition|offset`, with their event id. */
  readonly accepted = new Map<string, string>();
  rejectedBatches = 0;
  rejectedEvents = 0;
  startedAt = 0;
  endedAt = 0;
  private readonly seqs: number[];
  private running = false;
  private loop?: Promise<void>;
  private keepGoing: () => boolean = () => false;

  constructor(
    private readonly publisher: EventrailPublisher,
    private readonly limits: ProducerLimits,
    private readonly random: () => number = Math.random,
  ) {
    this.seqs = new Array<number>(limits.keys).fill(0);
  }

  get isRunning(): boolean {
    return this.running;
  }

  /** Share of the work done, by count or by time, whichever is further along (0..1). */
  progress(): number {
    if (!this.running) return 1;
    const byCount = this.accepted.size / this.limits.target;
    const byTime = (Date.now() - this.startedAt) / this.limits.maxMs;
    return Math.min(1, Math.max(byCount, byTime));
  }

  start(): void {
    this.running = true;
    this.startedAt = Date.now();
    this.loop = this.run().finally(() => {
      this.running = false;
      this.endedAt = Date.now();
    });
  }

  /**
   * Past its target (never past `maxMs`) the producer goes on while this holds: a chaos loop
   * whose faults are not all made yet keeps it publishing, so a slow fault (a server that took
   * seconds to start again on a loaded host) does not leave the run with a fault never made.
   */
  keepGoingWhile(condition: () => boolean): void {
    this.keepGoing = condition;
  }

  /** Resolves when the producer has finished on its own. */
  finished(): Promise<void> {
    return this.loop ?? Promise.resolve();
  }

  private async run(): Promise<void> {
    const deadline = this.startedAt + this.limits.maxMs;
    while ((this.accepted.size < this.limits.target || this.keepGoing()) && Date.now() < deadline) {
      const batch = this.nextBatch();
      let results: PublishResult[];
      try {
        results = await this.publisher.publishMany(batch);
      } catch (error) {
        if (!(error instanceof RedisUnavailableError)) throw error;
        this.rejectedBatches++;
        this.rejectedEvents += batch.length;
        await pause(AFTER_REJECT_MS);
        continue;
      }
      for (const r of results) this.accepted.set(entryRef(r.partition, r.offset), r.id);
      await pause(this.limits.paceMs);
    }
  }

  /** `batch` events for random keys, each with its key's next seq. */
  private nextBatch(): PublishInput[] {
    const events: PublishInput[] = [];
    for (let i = 0; i < this.limits.batch; i++) {
      const k = Math.floor(this.random() * this.limits.keys);
      events.push({ event: EVENTS.tick, key: `key-${k}`, data: { seq: ++this.seqs[k] } });
    }
    return events;
  }
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
