/**
 * A one-shot signal for a worker that is stopping: loops check `stopped`, and
 * waits race against `sleep`, which resolves early when the signal fires.
 */
export class StopSignal {
  private fired = false;
  private readonly listeners = new Set<() => void>();

  /** `halted`: a condition that also stops new work while it holds, without firing (a lease that may have expired). */
  constructor(private readonly halted: () => boolean = () => false) {}

  /** True once fired, or while `halted` says so: no new entry or retry may start. */
  get stopped(): boolean {
    return this.fired || this.halted();
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
