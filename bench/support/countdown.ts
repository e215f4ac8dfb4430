/**
 * Counts handled events and resolves when `expected` were seen, remembering
 * when the last one was (`performance.now()`); rejects after a deadline with
 * how far it got, so a stuck consumer fails the run instead of hanging it.
 */
export class Countdown {
  count = 0;
  finishedAt = 0;
  private resolve!: () => void;
  private readonly finished = new Promise<void>((resolve) => (this.resolve = resolve));

  constructor(readonly expected: number) {
    if (expected === 0) this.resolve();
  }

  /** One event handled. */
  hit(): void {
    if (++this.count === this.expected) {
      this.finishedAt = performance.now();
      this.resolve();
    }
  }

  async wait(timeoutMs: number, what: string): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: ${this.count} of ${this.expected} events after ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      await Promise.race([this.finished, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
