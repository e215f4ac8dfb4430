import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { EventrailRedis } from '../redis/eventrail-redis';

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

  /** True when this instance now holds the lock. */
  async acquire(): Promise<boolean> {
    const token = `${hostname()}:${process.pid}:${randomBytes(6).toString('hex')}`;
    const reply = await this.redis.client.set(this.redis.keys.retentionLock(), token, 'PX', this.ttlMs, 'NX');
    this.token = reply === 'OK' ? token : undefined;
    return this.token !== undefined;
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
