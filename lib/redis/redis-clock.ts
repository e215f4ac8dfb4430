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
  private offsetMs = 0;

  /** Records a `TIME` reply (`redisMs`) to a command sent at `sentAt` and answered at `receivedAt` (local ms). */
  observe(redisMs: number, sentAt: number, receivedAt: number): void {
    this.offsetMs = redisMs - Math.round((sentAt + receivedAt) / 2);
  }

  /** Now on the Redis clock, ms. */
  now(): number {
    return Date.now() + this.offsetMs;
  }

  /** A local time (ms) on the Redis clock. */
  fromLocal(localMs: number): number {
    return localMs + this.offsetMs;
  }

  /** A Redis-clock time (ms) on the local clock. */
  toLocal(redisMs: number): number {
    return redisMs - this.offsetMs;
  }
}
