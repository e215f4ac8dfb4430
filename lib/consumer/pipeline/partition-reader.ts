import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import type { EntryOrigin, MalformedEntry, RawEntry } from '../../wire/codec';
import { readEntryBuffers, readPackedEntries } from '../../wire/entry-reader';
import { XReadBufferReply } from '../../redis/stream-read';
import { EventrailScripts } from '../../redis/eventrail-scripts';
import { describeError } from '../../util/describe-error';
import { logRecord } from '../../util/log-record';

type Entry = RawEntry | MalformedEntry;

/** Replies that say the server is busy or moving, not that the script is unwelcome: the read failed, and is retried as any read. */
const TRANSIENT = /^(?:LOADING|BUSY|TRYAGAIN|CLUSTERDOWN|MASTERDOWN|READONLY|MOVED|ASK|OOM)\b/;

/**
 * Entries bigger than this (the partition's running estimate) are read with
 * XREAD even while behind: packing saves per-value decoding, which matters
 * for small entries only, and costs a copy of the batch in Lua's memory,
 * which `maxmemory` does not count.
 */
export const PACKED_MAX_ENTRY_BYTES = 16 * 1024;

/**
 * A cut read never lowers the bytes per read below this: a connection that
 * closed for another reason (a restart, a failover) then costs a partition
 * of small entries nothing.
 */
const LEAST_CEILING_BYTES = 1024 * 1024;
/**
 * How long a lowered byte ceiling holds. A restart or a failover of Redis under a read looks like a cut
 * too; after this long the reader asks for `maxReadBytes` again (a real limit then cuts one read more).
 */
const CEILING_HOLD_MS = 60_000;

/** Between two attempts at an entry that no read brings (each attempt makes Redis buffer the entry again). */
export const STUCK_RETRY_MS = 5_000;

const MIB = 1024 * 1024;

/** A size for a log line. */
function size(bytes: number): string {
  return bytes >= MIB ? `${(bytes / MIB).toFixed(1)} MiB` : `${(bytes / 1024).toFixed(1)} KiB`;
}

/** The read in flight: settled by its reply, or with no entries when Redis cut its connection. */
interface Flight {
  after: string;
  connection: Redis | Cluster;
  resolve: (entries: Entry[]) => void;
  done: boolean;
}

/** The read reader options the worker passes on. */
export interface PartitionReaderOptions {
  /** The group's `packedBacklogReads`: false reads with XREAD only. */
  packed: boolean;
  /** The group's `maxReadBytes`: what one read's reply may cost Redis. */
  maxReadBytes: number;
  /** The group, for log lines. */
  group: string;
}

/**
 * How a partition worker reads its stream. Caught up, it waits in
 * `XREAD BLOCK`, read as Buffers (`readEntryBuffers`). Behind, when the last
 * read came back full so more entries are there at once, it reads with
 * `readBacklog-1.lua` instead, which packs the batch into one string on
 * Redis's side: ioredis's per-value decoding was most of a drain's time, and
 * reads are prefetched, so Redis packs one batch while the worker handles
 * the one before. A packed read that comes back short means the worker
 * caught up, and the next read blocks again: an idle worker never polls.
 * One instance per worker, one read at a time.
 *
 * Reads are bounded by bytes as well as count. Redis buffers a reply whole
 * before sending it, and that buffer counts against `maxmemory` and the
 * client output buffer limit: 200 entries of 1 MiB are a 200 MiB reply. The
 * reader keeps a running estimate of the partition's bytes per entry (from
 * the replies it decodes anyway) and asks for at most `maxReadBytes` worth.
 * Without an estimate (the first read of a worker, or after a cut read) it
 * reads one entry first and the rest once that one's size is known. When
 * Redis closes the connection under a read (an output buffer limit below the
 * reply), the read is dropped, not sent again on the reconnected socket
 * (ioredis would, and Redis would close it again, for ever), and the next one
 * asks for less; an entry too big for any read is named in an error.
 */
export class PartitionReader {
  private readonly logger = new Logger(PartitionReader.name);
  /** The last read came back full: the stream has more right away. */
  private behind = false;
  /** The server refused the packed read (no Lua `cmsgpack`, say): read with XREAD only, from then on. */
  private packedRefused = false;
  /** Bytes per entry, recent replies weighed (quick to rise, halving to fall); undefined until a reply tells. */
  private perEntry?: number;
  /** Bytes one read may ask for: `maxReadBytes`, lowered when Redis cut a read smaller than that. */
  private ceiling: number;
  /** Entries per read after a cut: halved by each cut, doubled back by each read that comes back full. */
  private limit = Number.POSITIVE_INFINITY;
  /** What the read in flight asked for: a reply of as many means more are there (`behind`). */
  private expected = 0;
  private flight?: Flight;
  /** The connection whose closes are watched (the worker replaces it at times). */
  private watched?: Redis | Cluster;
  /** The last read Redis cut (where it started, how many entries it asked for), until a read lands. */
  private cut?: { after: string; count: number };
  /** The entry after this offset is too big for any read: attempts are spaced, and it was logged. */
  private stuck?: { after: string; logged: boolean };
  private warned = false;
  /** When the byte ceiling was last lowered (performance.now()), while it is. */
  private loweredAt?: number;

  constructor(
    private readonly stream: string,
    private readonly origin: EntryOrigin,
    private readonly options: PartitionReaderOptions,
  ) {
    this.packedRefused = !options.packed;
    this.ceiling = options.maxReadBytes;
  }

  /**
   * Up to `count` entries after `after` (fewer when that many would be over `maxReadBytes`), waiting up
   * to `blockMs` for the first when caught up. No entries when Redis closed the connection under the read.
   */
  read(connection: Redis | Cluster, after: string, count: number, blockMs: number): Promise<Entry[]> {
    this.watch(connection);
    let reading: Promise<Entry[]>;
    try {
      if (this.stuck?.after === after) reading = this.readStuck(connection, after, blockMs);
      else if (this.perEntry === undefined) reading = this.readProbing(connection, after, count, blockMs);
      else {
        const capped = this.capped(count);
        this.expected = capped;
        reading =
          this.behind && !this.packedRefused && this.perEntry <= PACKED_MAX_ENTRY_BYTES
            ? this.readPacked(connection, after, capped, blockMs)
            : this.readBlocking(connection, after, capped, blockMs);
      }
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise<Entry[]>((resolve, reject) => {
      const flight: Flight = { after, connection, resolve, done: false };
      this.flight = flight;
      reading.then(
        (entries) => {
          if (flight.done) return;
          flight.done = true;
          this.behind = entries.length > 0 && entries.length >= this.expected;
          if (entries.length > 0) this.cut = this.stuck = undefined;
          if (this.behind && this.limit !== Number.POSITIVE_INFINITY) this.limit *= 2;
          resolve(entries);
        },
        (error: unknown) => {
          if (flight.done) return;
          flight.done = true;
          reject(error);
        },
      );
    });
  }

  /** At most `count`, and at most what fits in the byte ceiling at the estimated size (never less than one). */
  private capped(count: number): number {
    if (this.loweredAt !== undefined && performance.now() - this.loweredAt >= CEILING_HOLD_MS) {
      this.ceiling = this.options.maxReadBytes;
      this.loweredAt = undefined;
    }
    return Math.max(1, Math.min(count, this.limit, Math.floor(this.ceiling / this.perEntry!)));
  }

  /** Takes a reply's size into the estimate: a rise counts at once, a fall by halves. */
  private observe(bytes: number, entries: number): void {
    if (entries === 0) return;
    const mean = bytes / entries;
    this.perEntry = this.perEntry === undefined ? mean : Math.max(mean, (this.perEntry + mean) / 2);
  }

  /**
   * No estimate yet: one entry (waiting for it when caught up), then, once its size is known, the rest
   * of the batch at once, without waiting. One more round trip per worker, and per cut read.
   */
  private readProbing(connection: Redis | Cluster, after: string, count: number, blockMs: number): Promise<Entry[]> {
    this.expected = 1;
    return this.readBlocking(connection, after, 1, blockMs).then((first) => {
      if (first.length === 0) return first;
      this.afterCut();
      const rest = this.capped(count) - 1;
      this.expected = rest + 1;
      if (rest === 0) return first;
      // Not waiting: the first entry is in hand, and what follows it now is the rest of this batch.
      return EventrailScripts.readStream(connection, this.stream, first[0].offset, rest)
        .then(this.decodeReply)
        .then((more) => (more.length === 0 ? first : [first[0], ...more]));
    });
  }

  /** The entry after `after` was cut on every read of it alone: named once, then tried again every `STUCK_RETRY_MS`. */
  private readStuck(connection: Redis | Cluster, after: string, blockMs: number): Promise<Entry[]> {
    return this.waitAtStuck(connection, after).then(() => {
      this.expected = 1;
      return this.readBlocking(connection, after, 1, blockMs);
    });
  }

  private async waitAtStuck(connection: Redis | Cluster, after: string): Promise<void> {
    const stuck = this.stuck!;
    if (!stuck.logged) {
      stuck.logged = true;
      const entry = await EventrailScripts.entrySize(connection, this.stream, after).catch(() => null);
      const what = entry ? `entry ${entry.id} (${size(entry.bytes)})` : `the entry after ${after}`;
      const { group } = this.options;
      const { partition } = this.origin;
      const text =
        `Group "${group}" partition ${partition}: Redis closes the connection on every read of ${what}, alone: ` +
        `its client-output-buffer-limit for normal clients is below the entry's size. The partition waits at it, ` +
        `trying again every ${STUCK_RETRY_MS / 1000} s: raise the limit above the entry's size, or move the group's offset past it`;
      this.logger.error(logRecord(text, { group, partition, offset: entry?.id, bytes: entry?.bytes }));
    }
    await new Promise<void>((resolve) => setTimeout(resolve, STUCK_RETRY_MS).unref());
  }

  /**
   * Redis closed the connection under a read: the read is dropped (settled with no entries, and not sent
   * again by ioredis), the estimate forgotten so the next read measures one entry first. A read of one
   * entry cut twice in a row from the same place is an entry no read brings.
   */
  private onCut(flight: Flight): void {
    flight.done = true;
    const last = this.cut;
    const count = this.expected;
    this.cut = { after: flight.after, count };
    if (count === 1 && last?.count === 1 && last.after === flight.after) {
      if (this.stuck?.after !== flight.after) this.stuck = { after: flight.after, logged: false };
    }
    // The size of one entry does not say the size of the next ones: fewer are asked for until reads land again.
    this.limit = Math.max(1, Math.floor(count / 2));
    this.perEntry = undefined;
    this.behind = false;
    flight.resolve([]);
  }

  /** The first read after a cut told the entries' size: lowers the ceiling below what was cut, and says so once. */
  private afterCut(): void {
    const cut = this.cut;
    if (!cut) return;
    this.stuck = undefined;
    const cutBytes = cut.count * this.perEntry!;
    // A small read cut is a connection that closed for another reason: nothing to learn.
    if (cutBytes < LEAST_CEILING_BYTES) return;
    this.ceiling = Math.min(this.ceiling, Math.max(LEAST_CEILING_BYTES, cutBytes / 2));
    this.loweredAt = performance.now();
    if (this.warned) return;
    this.warned = true;
    const { group } = this.options;
    const { partition } = this.origin;
    const text =
      `Group "${group}" partition ${partition}: Redis closed the connection during a read of ${cut.count} entries ` +
      `(about ${size(cutBytes)} at ${size(this.perEntry!)} an entry); reading at most ${this.capped(Number.MAX_SAFE_INTEGER)} ` +
      `entries (${size(this.ceiling)}) at a time for a minute. If its client-output-buffer-limit for normal clients closed it ` +
      `(Redis logs "overcoming of output buffer limits"; a restart or a failover closes connections too), ` +
      `keep that limit above maxReadBytes (${size(this.options.maxReadBytes)})`;
    this.logger.warn(logRecord(text, { group, partition, cutEntries: cut.count, entryBytes: Math.round(this.perEntry!) }));
  }

  /**
   * Watches `connection` for closes from Redis's side under a read. ioredis sends the commands a closed
   * socket left unanswered again on the new one; for a read whose reply Redis refuses to buffer, that
   * repeats for ever with nothing failing and nothing logged. So a watched connection does not send
   * them again, and a read cut that way is settled here. A close this process asked for (a stop, a
   * restart of the worker's connection) leaves the connection ended, not reconnecting, and is not a cut.
   * Cluster connections are not watched (their node sockets are not this object's).
   */
  private watch(connection: Redis | Cluster): void {
    if (this.watched === connection) return;
    this.watched = connection;
    if ('isCluster' in connection && connection.isCluster) return;
    const redis = connection as Redis;
    redis.options.autoResendUnfulfilledCommands = false;
    let live = redis.status === 'ready';
    redis.on('ready', () => (live = true));
    redis.on('close', () => {
      const wasLive = live;
      live = false;
      // A socket that never became ready sent nothing: its read waits in the offline queue and goes once connected.
      if (!wasLive || redis.status !== 'reconnecting') return;
      const flight = this.flight;
      if (flight && !flight.done && flight.connection === connection) this.onCut(flight);
    });
  }

  /** The entries of an XREAD reply read as Buffers (bound once: no closure per read); their size goes into the estimate. */
  private readonly decodeReply = (reply: XReadBufferReply): Entry[] => {
    if (!reply || reply.length === 0) return [];
    const raw = reply[0][1];
    const entries = new Array<Entry>(raw.length);
    let bytes = 0;
    for (let i = 0; i < raw.length; i++) {
      const [id, fields] = raw[i];
      bytes += id.length;
      for (let f = 0; f < fields.length; f++) bytes += fields[f].length;
      entries[i] = readEntryBuffers(id, fields, this.origin);
    }
    this.observe(bytes, raw.length);
    return entries;
  };

  private async readPacked(connection: Redis | Cluster, after: string, count: number, blockMs: number): Promise<Entry[]> {
    let packed: Buffer;
    try {
      packed = await EventrailScripts.readBacklog(connection, this.stream, after, count);
    } catch (error) {
      // A refusal is an answer: the connection is fine, the script is not welcome. Anything else is the read's failure.
      if (!(error instanceof Error && error.name === 'ReplyError') || TRANSIENT.test(error.message)) throw error;
      this.packedRefused = true;
      this.logger.warn(`Reading ${this.stream} with XREAD only: the packed backlog read was refused (${describeError(error)})`);
      return this.readBlocking(connection, after, count, blockMs);
    }
    const entries = readPackedEntries(packed, this.origin);
    this.observe(packed.length, entries.length);
    return entries;
  }

  private readBlocking(connection: Redis | Cluster, after: string, count: number, blockMs: number): Promise<Entry[]> {
    return EventrailScripts.readStream(connection, this.stream, after, count, blockMs).then(this.decodeReply);
  }
}
