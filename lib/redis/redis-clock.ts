/**
 * The Redis server's clock as this process sees it. Leases, heartbeats,
 * done-marks and failure times are written on Redis's clock (`TIME` inside
 * scripts), so a process that compares them with its own clock is wrong by
 * its skew: a worker ten minutes ahead took every done-mark of a ten-minute
 * TTL for expired and handled duplicates. The offset is learnt from the
 * `TIME` replies each heartbeat reads anyway (no extra command), taken at
 * the midpoint of the round trip, so it is off by at most half of one.
 * Until the first reply, the local clock stands in.
 */
export class RedisClock {
  /** Redis's clock minus this process's monotonic clock (`performance.now()`), as last observed. */
  private base?: number;

  /**
   * Records a `TIME` reply (`redisMs`) to a command sent at `sentAt` and
   * answered at `receivedAt` (both `performance.now()`). Kept against the
   * monotonic clock, so a step of this host's wall clock (NTP, a VM resumed)
   * between two heartbeats does not move it.
   */
  observe(redisMs: number, sentAt: number, receivedAt: number): void {
    this.base = redisMs - (sentAt + receivedAt) / 2;
  }

  /** Now on the Redis clock, ms (the local wall clock until the first reply). */
  now(): number {
    return this.base === undefined ? Date.now() : Math.round(performance.now() + this.base);
  }

  /** A Redis-clock time (ms) on this host's wall clock, as it reads now. */
  toLocal(redisMs: number): number {
    return redisMs - (this.now() - Date.now());
  }
}
