import { InvalidOptionError } from '../errors/invalid-option.error';
import type { EventrailRedis } from '../redis/eventrail-redis';
import { isStreamId } from '../wire/stream-id';
import { EntryOrigin, isMalformed, readEntry } from '../wire/codec';
import type { FollowOptions, LogEntry, LogPage, ReadLogOptions } from './admin.types';
import { toLogEntry } from './log-entry';
import { LogFollower } from './log-follower';
import { entrySize, nextRead, pageBudget } from './page-budget';

/** Entries read per round trip while filtering by event type. */
const SCAN_PAGE = 500;
/** Most entries one filtered `read` looks at; `next` lets the caller go on. */
const SCAN_LIMIT = 10_000;

/** Reads the log for the admin service: pages of a partition, one entry, and a live tail of every partition. */
export class LogReader {
  constructor(private readonly redis: EventrailRedis) {}

  async read(partition: number, { from, after, count = 50, events, maxBytes }: ReadLogOptions = {}): Promise<LogPage> {
    this.checkPartition(partition);
    if (!Number.isInteger(count) || count < 1 || count > 1000) throw new InvalidOptionError('count', count, 'an integer from 1 to 1000');
    if (events !== undefined && (!Array.isArray(events) || events.some((e) => typeof e !== 'string' || e === '')))
      throw new InvalidOptionError('events', events, 'a list of event types');
    const budget = pageBudget(maxBytes);
    const wanted = events && events.length > 0 ? new Set(events) : null;
    const stream = this.redis.keys.stream(partition);
    const origin = { partition, logTag: this.redis.keys.logTag };
    let start = startOf(from, after);
    const entries: LogEntry[] = [];
    let bytes = 0;
    let largest = 0;
    let scanned = 0;
    let scannedTo = after ?? null;
    for (;;) {
      const page = nextRead(wanted ? SCAN_PAGE : count - entries.length, budget - bytes, largest);
      const raw = await this.redis.client.xrange(stream, start, '+', 'COUNT', page);
      scanned += raw.length;
      for (const [offset, fields] of raw) {
        const size = entrySize(offset, fields);
        largest = Math.max(largest, size);
        if (wanted && !wanted.has(eventOf(offset, fields, origin) ?? '')) {
          scannedTo = offset;
          continue;
        }
        // Over the budget: this entry is left, undecoded, for the next page, which starts after the last one looked at.
        if (entries.length > 0 && bytes + size > budget) return { partition, entries, next: scannedTo, scannedTo };
        scannedTo = offset;
        entries.push(toLogEntry(origin, offset, fields));
        bytes += size;
        // A full page ends here: the caller continues after this entry.
        if (entries.length === count || bytes >= budget) return { partition, entries, next: offset, scannedTo };
      }
      if (raw.length < page) return { partition, entries, next: null, scannedTo };
      if (scanned >= SCAN_LIMIT) return { partition, entries, next: scannedTo, scannedTo };
      start = `(${scannedTo}`;
    }
  }

  async entry(partition: number, offset: string): Promise<LogEntry | null> {
    this.checkPartition(partition);
    if (typeof offset !== 'string' || !isStreamId(offset))
      throw new InvalidOptionError('offset', offset, 'a stream id such as "1700000000000-0"');
    const [found] = await this.redis.client.xrange(this.redis.keys.stream(partition), offset, offset);
    return found ? toLogEntry({ partition, logTag: this.redis.keys.logTag }, found[0], found[1]) : null;
  }

  /** The live tail: see `LogFollower`. */
  follow(options: FollowOptions = {}): AsyncIterableIterator<LogEntry> {
    return new LogFollower(this.redis, options);
  }

  private checkPartition(partition: number): void {
    const { partitions } = this.redis.keys;
    if (!Number.isInteger(partition) || partition < 0 || partition >= partitions)
      throw new InvalidOptionError('partition', partition, `an integer from 0 to ${partitions - 1}`);
  }
}

/** The event type of an entry, as `toLogEntry` would show it (null for a malformed one), without parsing its payload. */
function eventOf(offset: string, fields: string[], origin: EntryOrigin): string | null {
  const entry = readEntry(offset, fields, origin);
  return isMalformed(entry) ? null : entry.event;
}

function startOf(from: string | Date | undefined, after: string | undefined): string {
  if (after !== undefined) {
    if (typeof after !== 'string' || !isStreamId(after))
      throw new InvalidOptionError('after', after, 'a stream id such as "1700000000000-0"');
    return `(${after}`;
  }
  if (from === undefined) return '-';
  if (from instanceof Date && !Number.isNaN(from.getTime())) return `${Math.max(0, from.getTime())}-0`;
  if (typeof from === 'string' && isStreamId(from)) return from;
  throw new InvalidOptionError('from', from, 'a stream id such as "1700000000000-0" or a Date');
}
