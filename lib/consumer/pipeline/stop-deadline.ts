import { withTimeout } from '../../util/timeout';

/**
 * How long a stop waits for Redis once handlers are done (or `shutdownTimeoutMs`
 * ran out): the final commits, the lease releases and the leave of the group
 * together. A commit takes a millisecond; this is for a Redis that is slow or
 * failing over. A Redis that does not answer at all (a network cut that closes
 * nothing, so the connection still looks ready and every command waits for a
 * reply that never comes) gets no more than this: the process leaves without
 * them, the leases and the membership expire on their own, and the next owner
 * takes over after `lockTtlMs` from the last commit that landed. With the
 * connection's own QUIT (`QUIT_WAIT_MS`, 1 s), the consumers' part of
 * `app.close()` ends within `shutdownTimeoutMs` + 5 s.
 */
export const SHUTDOWN_REDIS_WAIT_MS = 4_000;

/** A point in time by which every wait of one stop has ended, whatever Redis does. */
export class StopDeadline {
  private readonly at: number;

  constructor(ms: number) {
    this.at = performance.now() + ms;
  }

  /** The deadline of a stop whose handlers get `shutdownTimeoutMs`: that, plus the wait for Redis. */
  static forShutdown(shutdownTimeoutMs: number): StopDeadline {
    return new StopDeadline(shutdownTimeoutMs + SHUTDOWN_REDIS_WAIT_MS);
  }

  /** Milliseconds left, 0 once past. */
  get leftMs(): number {
    return Math.max(0, this.at - performance.now());
  }

  /** How `work` settles, or `'late'` once the deadline passed first (a later failure of `work` is absorbed). */
  within<T>(work: PromiseLike<T> | undefined): Promise<T | 'late' | undefined> {
    if (work === undefined) return Promise.resolve(undefined);
    return withTimeout(work, this.leftMs, () => 'late' as const);
  }
}
