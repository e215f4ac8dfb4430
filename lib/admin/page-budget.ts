import { InvalidOptionError } from '../errors/invalid-option.error';

/** Default byte budget of one page of the log or of dead letters. */
export const DEFAULT_PAGE_BYTES = 4 * 1024 * 1024;
/** Largest byte budget a caller may ask for. */
export const MAX_PAGE_BYTES = 256 * 1024 * 1024;
/** Entries asked for by the first read of a page, before any entry's size is known. */
const FIRST_READ = 16;

type StreamEntries = Array<[string, string[]]>;

/** Checks a page's `maxBytes` option and gives the budget to use. */
export function pageBudget(maxBytes: number | undefined): number {
  if (maxBytes === undefined) return DEFAULT_PAGE_BYTES;
  if (!Number.isInteger(maxBytes) || maxBytes < 1 || maxBytes > MAX_PAGE_BYTES)
    throw new InvalidOptionError('maxBytes', maxBytes, `an integer from 1 to ${MAX_PAGE_BYTES} (256 MiB)`);
  return maxBytes;
}

/** What an entry weighs in a page: the length of its id and of every field name and value. */
export function entrySize(offset: string, fields: readonly string[]): number {
  let size = offset.length;
  for (const field of fields) size += field.length;
  return size;
}

/**
 * How many entries the next read of a page asks for: as many as the rest of
 * the budget holds at the size of the largest entry seen so far, between 1
 * and `limit`. The first read asks for a few, so that a partition of huge
 * entries is not read a thousand at a time to keep four.
 */
export function nextRead(limit: number, remainingBytes: number, largestSeen: number): number {
  if (largestSeen === 0) return Math.min(limit, FIRST_READ);
  return Math.max(1, Math.min(limit, Math.floor(remainingBytes / largestSeen)));
}

/**
 * Reads a page of up to `count` stream entries from `start` (an XRANGE or
 * XREVRANGE bound) whose sizes add up to at most `maxBytes`, and always at
 * least one. `read(start, n)` fetches n entries from a bound; `after(id)` is
 * the exclusive bound past an id. `more` is true when entries may follow
 * the page (it stopped at `count` or at the budget, not at the end).
 */
export async function readBudgeted(
  read: (start: string, n: number) => Promise<StreamEntries>,
  start: string,
  count: number,
  maxBytes: number,
  after: (id: string) => string,
): Promise<{ entries: StreamEntries; more: boolean }> {
  const entries: StreamEntries = [];
  let bytes = 0;
  let largest = 0;
  for (;;) {
    const n = nextRead(count - entries.length, maxBytes - bytes, largest);
    const chunk = await read(start, n);
    for (const entry of chunk) {
      const size = entrySize(entry[0], entry[1]);
      largest = Math.max(largest, size);
      if (entries.length > 0 && bytes + size > maxBytes) return { entries, more: true };
      entries.push(entry);
      bytes += size;
      if (entries.length === count || bytes >= maxBytes) return { entries, more: true };
    }
    if (chunk.length < n) return { entries, more: false };
    start = after(chunk[chunk.length - 1][0]);
  }
}
