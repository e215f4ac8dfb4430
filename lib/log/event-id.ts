import { randomUUID } from 'node:crypto';

/**
 * A UUIDv7: 48 bits of Unix milliseconds, then random bits, so ids sort by
 * publish time. Built from `randomUUID()` (which batches its entropy) by
 * overwriting the time and version digits.
 */
export function newEventId(now = Date.now()): string {
  const random = randomUUID();
  const time = now.toString(16).padStart(12, '0');
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${random.slice(15)}`;
}
