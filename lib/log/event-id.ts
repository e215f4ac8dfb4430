import { randomUUID } from 'node:crypto';

let lastMs = -1;
let timeDigits = '';

/**
 * A UUIDv7: 48 bits of Unix milliseconds, then random bits, so ids sort by
 * publish time. Built from `randomUUID()` (which batches its entropy) by
 * overwriting the time and version digits; the time part is formatted once
 * per millisecond.
 */
export function newEventId(now = Date.now()): string {
  if (now !== lastMs) {
    lastMs = now;
    const hex = now.toString(16).padStart(12, '0');
    timeDigits = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7`;
  }
  return timeDigits + randomUUID().slice(15);
}
