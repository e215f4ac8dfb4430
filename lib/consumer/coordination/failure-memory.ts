import type { EventrailRedis } from '../../redis/eventrail-redis';

/**
 * Since when a message has been failing, kept in Redis for retries by time
 * (`maxRetryAgeMs`), so a restart, a hand-back or a takeover does not start
 * the budget again. Asked once per failing message and worker, on its first
 * failure there: one round trip off the happy path. The state lives in the
 * partition's recovery hash (markFailure-1.lua), one entry per partition.
 */
export class FailureMemory {
  constructor(
    private readonly redis: EventrailRedis,
    private readonly group: string,
  ) {}

  /** When the entry at `offset` first failed, in any worker; `now` when this is the first time, or Redis cannot say. */
  async failingSince(partition: number, offset: string, now: Date): Promise<Date> {
    try {
      // Stored on Redis's clock, so workers on hosts with skewed clocks agree on the age.
      const { clock } = this.redis;
      const since = await this.redis.scripts.markFailure({ group: this.group, partition, offset, nowMs: clock.now() });
      // A time from the future (an older worker wrote its own clock, ahead of Redis's) counts from now instead.
      return new Date(Math.min(clock.toLocal(since), now.getTime()));
    } catch {
      // Redis is away: the budget counts from this worker's first failure, as without the memory.
      return now;
    }
  }
}
