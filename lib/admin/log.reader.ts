import type { Cluster, Redis } from 'ioredis';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { decodePayload, DecodeError, isMalformed, readEntry } from '../log/codec';
import type { EventrailRedis } from '../redis/eventrail-redis';
import { isStreamId } from '../log/stream-id';
import type { FollowOptions, LogEntry, LogPage, ReadLogOptions } from './admin.types';

/** Entries read per round trip while filtering by event type. */
const SCAN_PAGE = 500;
/** Most entries one filtered `read` looks at; `next` lets the caller go on. */
const SCAN_LIMIT = 10_000;
type XReadReply = Array<[string, Array<[string, string[]]>]> | null;

/** Reads the log for the admin service: pages of a partition, one entry, and a live tail of every partition. */
export class LogReader {
  constructor(private readonly redis: EventrailRedis) {}

  async read(partition: number, { from, after, count = 50, events }: ReadLogOptions = {}): Promise<LogPage> {
    this.checkPartition(partition);
    if (!Number.isInteger(count) || count < 1 || count > 1000) throw new InvalidOptionError('count', count, 'an integer from 1 to 1000');
    if (events !== undefined && (!Array.isArray(events) || events.some((e) => typeof e !== 'string' || e === '')))
      throw new InvalidOptionError('events', events, 'a list of event types');
    const wanted = events && events.length > 0 ? new Set(events) : null;
    const stream = this.redis.keys.stream(partition);
    let start = startOf(from, after);
    const entries: LogEntry[] = [];
    let scanned = 0;
    for (;;) {
      const page = wanted ? SCAN_PAGE : count;
      const raw = await this.redis.client.xrange(stream, start, '+', 'COUNT', page);
      scanned += raw.length;
      for (const [offset, fields] of raw) {
        const entry = toLogEntry(partition, offset, fields);
        if (wanted && !(entry.event !== null && wanted.has(entry.event))) continue;
        entries.push(entry);
        // A full page ends here: the caller continues after this entry.
        if (entries.length === count) return { partition, entries, next: offset };
      }
      if (raw.length < page) return { partition, entries, next: null };
      const last = raw[raw.length - 1][0];
      if (scanned >= SCAN_LIMIT) return { partition, entries, next: last };
      start = `(${last}`;
    }
  }

  async entry(partition: number, offset: string): Promise<LogEntry | null> {
    this.checkPartition(partition);
    if (typeof offset !== 'string' || !isStreamId(offset))
      throw new InvalidOptionError('offset', offset, 'a stream id such as "1700000000000-0"');
    const [found] = await this.redis.client.xrange(this.redis.keys.stream(partition), offset, offset);
    return found ? toLogEntry(partition, found[0], found[1]) : null;
  }

  /**
   * Entries appended from now on, in every partition, until `signal` aborts.
   * Each reader waits in `XREAD BLOCK` on a connection of its own (one for a
   * single Redis, one per partition on a cluster, where a read spans one slot),
   * so an idle tail sends nothing.
   */
  async *follow({ events, signal, onListening }: FollowOptions = {}): AsyncGenerator<LogEntry> {
    const wanted = events && events.length > 0 ? new Set(events) : null;
    const { keys, client } = this.redis;
    const all = keys.streams.map((_, p) => p);
    const lastIds = await Promise.all(
      keys.streams.map(async (stream) => (await client.xrevrange(stream, '+', '-', 'COUNT', 1))[0]?.[0] ?? '0-0'),
    );
    onListening?.();
    const readers = this.redis.isCluster ? all.map((p) => [p]) : [all];
    const connections = readers.map(() => this.redis.duplicate());
    const queue: LogEntry[] = [];
    let wake: (() => void) | undefined;
    let failure: unknown;
    let running = readers.length;
    const stop = (): void => connections.forEach((c) => c.disconnect());
    signal?.addEventListener('abort', stop, { once: true });
    const push = (entry: LogEntry): void => {
      if (!wanted || (entry.event !== null && wanted.has(entry.event))) queue.push(entry);
    };
    const loops = readers.map((partitions, i) =>
      readLoop(connections[i], partitions, lastIds, keys.streams, push, () => wake?.(), signal)
        .catch((error: unknown) => {
          if (!signal?.aborted) failure ??= error;
        })
        .finally(() => {
          running--;
          wake?.();
        }),
    );
    try {
      for (;;) {
        while (queue.length > 0) yield queue.shift() as LogEntry;
        if (failure) throw failure;
        if (running === 0 || signal?.aborted) return;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
    } finally {
      signal?.removeEventListener('abort', stop);
      stop();
      await Promise.all(loops);
    }
  }

  private checkPartition(partition: number): void {
    const { partitions } = this.redis.keys;
    if (!Number.isInteger(partition) || partition < 0 || partition >= partitions)
      throw new InvalidOptionError('partition', partition, `an integer from 0 to ${partitions - 1}`);
  }
}

async function readLoop(
  connection: Redis | Cluster,
  partitions: number[],
  lastIds: string[],
  streams: readonly string[],
  push: (entry: LogEntry) => void,
  notify: () => void,
  signal: AbortSignal | undefined,
): Promise<void> {
  const byStream = new Map(partitions.map((p) => [streams[p], p]));
  while (!signal?.aborted) {
    const ids = partitions.map((p) => lastIds[p]);
    const reply = (await connection.xread(
      'COUNT',
      SCAN_PAGE,
      'BLOCK',
      0,
      'STREAMS',
      ...partitions.map((p) => streams[p]),
      ...ids,
    )) as XReadReply;
    for (const [stream, entries] of reply ?? []) {
      const partition = byStream.get(stream) as number;
      for (const [offset, fields] of entries) push(toLogEntry(partition, offset, fields));
      if (entries.length > 0) lastIds[partition] = entries[entries.length - 1][0];
    }
    notify();
  }
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

function toLogEntry(partition: number, offset: string, fields: string[]): LogEntry {
  const raw = readEntry(offset, fields);
  if (isMalformed(raw)) {
    return {
      partition,
      offset,
      id: null,
      event: null,
      key: null,
      data: null,
      headers: {},
      publishedAt: null,
      to: null,
      malformed: raw.reason,
      fields,
    };
  }
  const base = {
    partition,
    offset,
    id: raw.id,
    event: raw.event,
    key: raw.key,
    publishedAt: new Date(raw.time),
    to: raw.to ?? null,
    fields: null,
  };
  try {
    return { ...base, ...decodePayload(raw), malformed: null };
  } catch (error) {
    if (!(error instanceof DecodeError)) throw error;
    return { ...base, data: raw.data, headers: {}, malformed: error.message };
  }
}
