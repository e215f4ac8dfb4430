/**
 * The Redis server's clock as this process sees it. Leases, heartbeats,
 * done-marks and failure times are written on Redis's clock (`TIME` inside
 * scripts), so a process that compares them with its own clock is wrong by
 * its skew: a worker ten minutes ahead took every done-mark of a ten-minute
 * TTL for expired and handled duplicates. The offset is learnt from the
 * `TIME` replies each heartbeat reads anyway (no extra command). A reply
 * says Redis read its clock somewhere within the round trip: a quick one is
 * taken at its midpoint; a slow one (a stalled Redis, a loaded host) only
 * moves the offset as far as it must to fit inside its round trip, so one
 * heartbeat held up for seconds does not skew the clock by half of that
 * (it had made a parked message give up its redelivery budget 750 ms early).
 * Until the first reply, the local clock stands in.
 */
export class RedisClock {
  /** Redis's clock minus this process's monotonic clock (`performance.now()`), as last observed. */
  private base?: number;
  /** The round trip of the reply `base` was last taken from (its error is at most half of it). */
  private baseRoundTrip = Infinity;

  /**
   * Records a `TIME` reply (`redisMs`) to a command sent at `sentAt` and
   * answered at `receivedAt` (both `performance.now()`). Kept against the
   * monotonic clock, so a step of this host's wall clock (NTP, a VM resumed)
   * between two heartbeats does not move it.
   */
  observe(redisMs: number, sentAt: number, receivedAt: number): void {
    const roundTrip = receivedAt - sentAt;
    // Redis read its clock between sentAt and receivedAt: base lies within these.
    const low = redisMs - receivedAt;
    const high = redisMs - sentAt;
    if (this.base === undefined || roundTrip <= QUICK_ROUND_TRIP_MS || roundTrip <= 2 * this.baseRoundTrip) {
      this.base = (low + high) / 2;
      this.baseRoundTrip = roundTrip;
      return;
    }
    this.base = Math.min(Math.max(this.base, low), high);
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

/** A round trip this short is taken at its midpoint whatever came before: off by at most 5 ms. */
const QUICK_ROUND_TRIP_MS = 10;
