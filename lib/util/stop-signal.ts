/**
 * A one-shot signal for a worker that is stopping: loops check `stopped`, and
 * waits race against `sleep`, which resolves early when the signal fires.
 */
export class StopSignal {
  private fired = false;
  private readonly listeners = new Set<() => void>();
  private readonly endedWhileGoing = new Set<string>();

  /** `halted`: a condition that also stops new work while it holds, without firing (a lease that may have expired). */
  constructor(private readonly halted: () => boolean = () => false) {}

  /** True once fired, or while `halted` says so: no new entry or retry may start. */
  get stopped(): boolean {
    return this.fired || this.halted();
  }

  /**
   * Offsets of the entries (or parked heads) a handler call of which ended while nothing halted
   * (`noteEnded`): with a lease as `halted`, calls that ended under a valid lease. Noted once per fetch
   * and on failure paths, the most recent `ENDED_KEPT` only.
   */
  get endedWhileHeld(): ReadonlySet<string> {
    return this.endedWhileGoing;
  }

  /** A handler call on `offset` ended: kept if nothing halts now (see `endedWhileHeld`). */
  noteEnded(offset: string): void {
    if (this.stopped) return;
    const kept = this.endedWhileGoing;
    kept.delete(offset);
    kept.add(offset);
    if (kept.size > ENDED_KEPT) kept.delete(kept.values().next().value!);
  }

  fire(): void {
    if (this.fired) return;
    this.fired = true;
    for (const listener of this.listeners) listener();
    this.listeners.clear();
  }

  /** Waits `ms`, or less if the signal fires; resolves true when it fired. */
  sleep(ms: number): Promise<boolean> {
    if (this.fired) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.listeners.delete(done);
        resolve(this.fired);
      };
      const timer = setTimeout(done, ms);
      this.listeners.add(done);
    });
  }
}

/** Offsets `StopSignal.endedWhileHeld` keeps: the entries a take-back can start at, and the parked heads running then, are recent ones. */
const ENDED_KEPT = 1024;
