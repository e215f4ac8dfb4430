/** Sends one commit: the verdict is false when the lease was lost or the commit's fate is unknown. */
export type SendCommit = (mark: string, doneIds: readonly string[]) => Promise<boolean>;

/**
 * The commits of one partition worker, off the read → handler path. At most
 * one commit is in flight, and two are sent at least `spacingMs` apart; the
 * marks of batches finished meanwhile merge into the next one (the newest
 * mark, with the done ids of every batch it covers). So a worker that handles
 * one event per batch at a few thousand events a second sends a commit every
 * few milliseconds instead of one per event, and never waits for one before
 * handling the next batch. What it costs: a crash replays at most the last
 * `spacingMs` (plus one round trip) more, which at-least-once allows.
 *
 * After a failed commit nothing more is sent: the worker drops the partition.
 */
export class CommitQueue {
  private inFlight?: Promise<boolean>;
  /** The done ids of the commit in flight. */
  private inFlightIds: readonly string[] = [];
  private queued?: { mark: string; doneIds: string[] };
  private timer?: NodeJS.Timeout;
  private lastSentAt = -Infinity;
  private failed = false;
  /** A flush is waiting: what is queued leaves as soon as nothing is in flight, spacing or not. */
  private flushing = false;
  /** Settles when the queue is empty and nothing is in flight; the verdict of everything sent. */
  private idle: Promise<boolean> = Promise.resolve(true);
  private onIdle?: (ok: boolean) => void;

  constructor(
    private readonly send: SendCommit,
    private readonly spacingMs: number,
  ) {}

  /** Queues the commit of `mark`; it leaves at once when nothing is in flight and the spacing has passed. */
  push(mark: string, doneIds: readonly string[]): void {
    if (this.failed) return;
    if (this.queued) {
      this.queued.mark = mark;
      for (const id of doneIds) this.queued.doneIds.push(id);
    } else {
      // Without idempotency there are no ids: nothing is copied.
      this.queued = { mark, doneIds: doneIds.length === 0 ? [] : [...doneIds] };
    }
    if (!this.onIdle) this.idle = new Promise((resolve) => (this.onIdle = resolve));
    this.schedule();
  }

  /**
   * Sends what is queued without waiting for the spacing, and settles once
   * every commit pushed so far has landed: true when all of them did.
   */
  flush(): Promise<boolean> {
    if (this.failed) return Promise.resolve(false);
    if (!this.queued && !this.inFlight) return Promise.resolve(true);
    this.flushing = true;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    this.schedule();
    return this.idle;
  }

  /**
   * The ids of `ids` whose done-marks are queued or in flight: done, though
   * Redis may not say so yet. An id can come back in a later batch (a replay
   * next to the original, an outbox row appended twice) while the commit that
   * marks it waits out the spacing; idempotency must skip it then too.
   */
  pending(ids: readonly string[]): string[] {
    const queued = this.queued?.doneIds ?? [];
    if (queued.length === 0 && this.inFlightIds.length === 0) return [];
    const marked = new Set(queued);
    for (const id of this.inFlightIds) marked.add(id);
    return ids.filter((id) => marked.has(id));
  }

  /** The lease is gone: nothing queued is sent any more (a commit in flight still settles). */
  cancel(): void {
    this.failed = true;
    this.queued = undefined;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (!this.inFlight) this.landed(false);
  }

  private schedule(): void {
    if (this.inFlight || this.timer || !this.queued) return;
    const wait = this.flushing ? 0 : this.lastSentAt + this.spacingMs - performance.now();
    if (wait <= 0) this.sendQueued();
    else
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.schedule();
      }, wait);
  }

  private sendQueued(): void {
    const next = this.queued;
    if (!next) return;
    this.queued = undefined;
    this.lastSentAt = performance.now();
    this.inFlightIds = next.doneIds;
    const inFlight = this.send(next.mark, next.doneIds).catch(() => false);
    this.inFlight = inFlight;
    void inFlight.then((ok) => this.landed(ok));
  }

  private landed(ok: boolean): void {
    this.inFlight = undefined;
    this.inFlightIds = [];
    if (!ok) {
      this.failed = true;
      this.queued = undefined;
      if (this.timer) clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.queued) {
      this.schedule();
      return;
    }
    const onIdle = this.onIdle;
    this.onIdle = undefined;
    this.flushing = false;
    onIdle?.(ok && !this.failed);
  }
}
