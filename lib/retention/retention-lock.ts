import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { RedisFullError } from '../errors/redis-full.error';
import type { EventrailRedis } from '../redis/eventrail-redis';
import { describeError } from '../util/describe-error';

/** Where the lock script is refused too: Redis before 7.0 has no script flags (allow-oom), the rest is by hand. */
export const OLD_REDIS_HINT =
  "Redis before 7.0 cannot do that on a full Redis: free memory by hand (XTRIM of a partition's log with MINID below every " +
  'live group\'s committed offset, DEL of dead-letter streams) or raise maxmemory for one cycle; see "Redis full or down" in ' +
  'docs/operations/runbook.md';

/**
 * The fleet-wide retention lock: `SET NX PX` with a fresh token per cycle,
 * extended while the cycle works and released by a script that deletes it only
 * if it still holds that token. It saves duplicate work rather than
 * guarding safety: two cycles at once would compute the same trims and write
 * the same archive names.
 */
export class RetentionLock {
  private token: string | undefined;

  constructor(
    private readonly redis: EventrailRedis,
    private readonly ttlMs: number,
  ) {}

  /**
   * True when this instance now holds the lock. On a Redis over maxmemory,
   * which refuses the `SET`, the lock is taken by a script that may write
   * anyway (Redis 7.0+): a cycle frees memory, so it must run on a full
   * Redis. Where that script cannot run either, `RedisFullError` says so.
   */
  async acquire(): Promise<boolean> {
    const token = `${hostname()}:${process.pid}:${randomBytes(6).toString('hex')}`;
    const taken = await this.redis.client.set(this.redis.keys.retentionLock(), token, 'PX', this.ttlMs, 'NX').then(
      (reply) => reply === 'OK',
      (error: unknown) => {
        if (!RedisFullError.isOutOfMemory(error)) throw error;
        return this.redis.scripts.takeRetentionLockWhenFull({ token, ttlMs: this.ttlMs }).catch((refused: unknown) => {
          throw new RedisFullError('take the retention lock', describeError(refused), OLD_REDIS_HINT);
        });
      },
    );
    this.token = taken ? token : undefined;
    return taken;
  }

  /** Extends the lock; false when it expired and another instance may hold it now. */
  async extend(): Promise<boolean> {
    if (this.token === undefined) return false;
    // The lease renewal script is a plain "extend if it still holds my token".
    return this.redis.scripts.extendRetentionLock({ token: this.token, ttlMs: this.ttlMs });
  }

  async release(): Promise<void> {
    if (this.token === undefined) return;
    const token = this.token;
    this.token = undefined;
    await this.redis.scripts.releaseRetentionLock({ token });
  }
}
