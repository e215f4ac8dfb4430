/**
 * Limits handler calls in flight for a group in this process. `tryAcquire`
 * lets the uncontended path skip a promise per message.
 */
export class Semaphore {
  private readonly waiters: Array<() => void> = [];

  constructor(private available: number) {}

  tryAcquire(): boolean {
    if (this.available > 0) {
      this.available--;
      return true;
    }
    return false;
  }

  acquire(): Promise<void> {
    if (this.tryAcquire()) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.available++;
  }
}
