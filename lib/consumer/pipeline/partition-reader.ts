import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import type { EntryOrigin, MalformedEntry, RawEntry } from '../../wire/codec';
import { readEntryBuffers } from '../../wire/entry-reader';
import { XReadBufferReply } from '../../redis/stream-read';
import { EventrailScripts, type BacklogRead, type IndexKeys } from '../../redis/eventrail-scripts';
import { BIG_ENTRY_BYTES, FRAME_BYTES } from '../../redis/big-entries';
import { compareStreamIds } from '../../wire/stream-id';
import { describeError } from '../../util/describe-error';
import { logRecord } from '../../util/log-record';

type Entry = RawEntry | MalformedEntry;

/** Replies that say the server is busy or moving, not that the script is unwelcome: the read failed, and is retried as any read. */
const TRANSIENT = /^(?:LOADING|BUSY|TRYAGAIN|CLUSTERDOWN|MASTERDOWN|READONLY|MOVED|ASK|OOM)\b/;

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

/** Fewest entries a plain read between big entries asks for: below it (a small `maxReadBytes`), the script reads. */
const LEAST_PLAIN_READ = 32;

/** Between two attempts at an entry that no read brings (each attempt makes Redis buffer the entry again). */
export const STUCK_RETRY_MS = 5_000;

const MIB = 1024 * 1024;

/** A size for a log line. */
function size(bytes: number): string {
  return bytes >= MIB ? `${(bytes / MIB).toFixed(1)} MiB` : `${(bytes / 1024).toFixed(1)} KiB`;
}

/**
 * The size in bytes of an entry read as Buffers, as readBacklog-1.lua counts it: its id, field names and
 * values, and FRAME_BYTES for the id and each field (entries of many empty fields weigh what they cost).
 */
function entryBytes(id: Buffer, fields: Buffer[]): number {
  let bytes = id.length + FRAME_BYTES * (fields.length + 1);
  for (let f = 0; f < fields.length; f++) bytes += fields[f].length;
  return bytes;
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
  /** The group's `packedBacklogReads`: false reads with XREAD only, bounded by the entry sizes seen. */
  packed: boolean;
  /** The group's `maxReadBytes`: what one read's reply may cost Redis. */
  maxReadBytes: number;
  /** The group, for log lines. */
  group: string;
  /** The partition's stream and index keys: while behind, reads are plain XRANGE between big entries (readIndex-3.lua). */
  index?: IndexKeys;
}

/**
 * Where the reads may go with plain XRANGE: every entry after the offset and before `end` (exclusive)
 * was appended before the question and is not big. `big`: `end` is a big entry's id.
 */
interface Region {
  /** The offset the index was asked after: reads from before it are not covered. */
  start: string;
  end: string;
  big: boolean;
}

/**
 * How a partition worker reads its stream. Caught up, it waits in
 * `XREAD BLOCK`, read as Buffers (`readEntryBuffers`). Behind, when the last
 * read came back full so more entries are there at once, it reads plain
 * `XRANGE` up to the next big entry the partition's index knows of
 * (`readBehind`: every entry before it is at most `BIG_ENTRY_BYTES`, so the
 * reply's size is known beforehand), and where the index cannot tell, with
 * `readBacklog-1.lua`, which stops at a byte bound, and answers the
 * entries as XRANGE does, so all decode alike. (It used to pack the batch
 * into one MessagePack string: less decoding for the client, but 5 µs of
 * Redis CPU per entry against 0.8 for XREAD, on the one thread every group
 * shares; the plain reply costs about 3.) Reads are prefetched, so Redis
 * reads one batch while the worker handles the one before. A script read
 * that comes back short means the worker caught up, and the next read
 * blocks again: an idle worker never polls. One instance per worker, one
 * read at a time.
 *
 * Reads are bounded by bytes as well as count. Redis buffers a reply whole
 * before sending it, and that buffer counts against `maxmemory` and the
 * client output buffer limit: 200 entries of 1 MiB are a 200 MiB reply. A
 * read while behind goes through the script, which sums the entries' sizes
 * as it takes them and stops at `maxReadBytes` (one entry at least), so it
 * holds whatever the sizes of the entries to come; an entry that fills half
 * of that alone is read by itself with XREAD, so that the script does not
 * copy it. XREAD cannot stop at a byte count: a read that waits (caught up)
 * asks for what fits at the biggest entry size seen lately, so only entries
 * bigger than any of late that arrive together while it waits can take it
 * past the bound. Without an estimate (the first read of a worker, or after
 * a cut read) it reads one entry first and the rest once that one's size is
 * known. When
 * Redis closes the connection under a read (an output buffer limit below the
 * reply), the read is dropped, not sent again on the reconnected socket
 * (ioredis would, and Redis would close it again, for ever), and the next one
 * asks for less; an entry too big for any read is named in an error.
 */
export class PartitionReader {
  private readonly logger = new Logger(PartitionReader.name);
  /** The last read came back full: the stream has more right away. */
  private behind = false;
  /** The server refused the script read (scripting off, say): read with XREAD only, from then on. */
  private packedRefused = false;
  /** Bytes per entry, recent replies weighed (quick to rise, halving to fall); undefined until a reply tells. */
  private perEntry?: number;
  /** The biggest entry of recent replies, or left out by the last packed read (quick to rise, halving to fall). */
  private largest = 0;
  /** The size of the entry the last packed read left out for the bytes (0 when none): the next read starts at it. */
  private left = 0;
  /** Bytes per entry of the last reply alone: whether the entries now are too big to pack (`packs`). */
  private lastMean = 0;
  /** The read in flight stopped at the byte bound: more entries are there (`behind`), however few it brought. */
  private more = false;
  /** Bytes one read may ask for: `maxReadBytes`, lowered when Redis cut a read smaller than that. */
  private ceiling: number;
  /** Entries per read after a cut: halved by each cut, doubled back by each read that comes back full. */
  private limit = Number.POSITIVE_INFINITY;
  /** What the read in flight asked for: a reply of as many means more are there (`behind`). */
  private expected = 0;
  /** The bytes the read in flight was bounded to: the byte ceiling for a packed read, none for XREAD. */
  private expectedBytes = Number.POSITIVE_INFINITY;
  private flight?: Flight;
  /** The connection whose closes are watched (the worker replaces it at times). */
  private watched?: Redis | Cluster;
  /** The last read Redis cut (where it started, how many entries and bytes it asked for), until a read lands. */
  private cut?: { after: string; count: number; bytes: number };
  /** The entry after this offset is too big for any read: attempts are spaced, and it was logged. */
  private stuck?: { after: string; logged: boolean };
  private warned = false;
  /** When the byte ceiling was last lowered (performance.now()), while it is. */
  private loweredAt?: number;
  /** Where reads go with plain XRANGE while behind (`readIndexed`); asked again once passed. */
  private region?: Region;
  /** Entries up to this id may be big without being indexed (appended before the index was): the script reads them. */
  private unindexedUntil?: string;
  /** When the index was found not to cover the partition (performance.now()): the script reads it, and it is asked again after `CEILING_HOLD_MS`. */
  private indexOffAt?: number;
  private warnedUnindexed = false;

  constructor(
    private readonly stream: string,
    private readonly origin: EntryOrigin,
    private readonly options: PartitionReaderOptions,
  ) {
    this.packedRefused = !options.packed;
    this.ceiling = options.maxReadBytes;
  }

  /** The last read came back full (or stopped at the byte bound): more entries are there at once. */
  get isBehind(): boolean {
    return this.behind;
  }

  /**
   * Up to `count` entries after `after` (fewer when that many would be over `maxReadBytes`), waiting up
   * to `blockMs` for the first when caught up. No entries when Redis closed the connection under the read.
   */
  read(connection: Redis | Cluster, after: string, count: number, blockMs: number): Promise<Entry[]> {
    this.watch(connection);
    this.raiseCeiling();
    this.more = false;
    this.expectedBytes = Number.POSITIVE_INFINITY;
    let reading: Promise<Entry[]>;
    try {
      if (this.stuck?.after === after) reading = this.readStuck(connection, after, blockMs);
      else if (this.perEntry === undefined) reading = this.readProbing(connection, after, count, blockMs);
      else if (this.behind && this.packs()) {
        this.expected = Math.min(count, this.limit);
        reading = this.readBehind(connection, after, this.expected, blockMs);
      } else {
        this.expected = this.sized(count);
        reading = this.readBlocking(connection, after, this.expected, blockMs);
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
          this.behind = entries.length > 0 && (entries.length >= this.expected || this.more);
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

  /** A lowered byte ceiling has held for `CEILING_HOLD_MS`: back to `maxReadBytes`. */
  private raiseCeiling(): void {
    if (this.loweredAt !== undefined && performance.now() - this.loweredAt >= CEILING_HOLD_MS) {
      this.ceiling = this.options.maxReadBytes;
      this.loweredAt = undefined;
    }
  }

  /**
   * Whether a read while behind goes through the script: yes, unless packing is off or refused, or the
   * entries (those of the last reply, or the one the last packed read left out) fill half the ceiling
   * alone, so a read brings one of them: XREAD of one entry is as exact, and Lua does not copy it.
   */
  private packs(): boolean {
    return !this.packedRefused && 2 * Math.max(this.lastMean, this.left) <= this.ceiling;
  }

  /**
   * An XREAD's count: at most `count`, and what fits in the byte ceiling at the biggest entry size seen
   * lately, not the mean (never less than one). XREAD cannot stop at a byte count; sized by the biggest,
   * a read goes past the ceiling only over entries bigger than any of late.
   */
  private sized(count: number): number {
    const size = Math.max(this.perEntry ?? 0, this.largest, 1);
    return Math.max(1, Math.min(count, this.limit, Math.floor(this.ceiling / size)));
  }

  /** Takes a reply's sizes into the estimates: a rise counts at once, a fall by halves. */
  private observe(bytes: number, entries: number, largest: number): void {
    if (entries === 0) return;
    const mean = bytes / entries;
    this.lastMean = mean;
    this.perEntry = this.perEntry === undefined ? mean : Math.max(mean, (this.perEntry + mean) / 2);
    this.largest = Math.max(largest, this.largest / 2);
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
      // Not waiting: the first entry is in hand, and what follows it now is the rest of this batch.
      let rest: Promise<Entry[]>;
      if (this.packs()) {
        this.expected = Math.min(count, this.limit);
        if (this.expected === 1) return first;
        rest = this.readBehind(connection, first[0].offset, this.expected - 1);
      } else {
        this.expected = this.sized(count);
        if (this.expected === 1) return first;
        rest = EventrailScripts.readStream(connection, this.stream, first[0].offset, this.expected - 1).then(this.decodeReply);
      }
      return rest.then((more) => (more.length === 0 ? first : [first[0], ...more]));
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
    this.cut = { after: flight.after, count, bytes: this.expectedBytes };
    if (count === 1 && last?.count === 1 && last.after === flight.after) {
      if (this.stuck?.after !== flight.after) this.stuck = { after: flight.after, logged: false };
    }
    // The size of one entry does not say the size of the next ones: fewer are asked for until reads land again.
    this.limit = Math.max(1, Math.floor(count / 2));
    this.perEntry = undefined;
    this.largest = this.left = this.lastMean = 0;
    this.behind = false;
    flight.resolve([]);
  }

  /** The first read after a cut told the entries' size: lowers the ceiling below what was cut, and says so once. */
  private afterCut(): void {
    const cut = this.cut;
    if (!cut) return;
    this.stuck = undefined;
    // A packed read brought at most its byte bound (and one entry over it alone), whatever the count.
    const cutBytes = Math.min(cut.count * this.perEntry!, Math.max(cut.bytes, this.perEntry!));
    // A small read cut is a connection that closed for another reason: nothing to learn.
    if (cutBytes < LEAST_CEILING_BYTES) return;
    this.ceiling = Math.min(this.ceiling, Math.max(LEAST_CEILING_BYTES, cutBytes / 2));
    this.loweredAt = performance.now();
    if (this.warned) return;
    this.warned = true;
    const { group } = this.options;
    const { partition } = this.origin;
    const text =
      // A plain read asks for up to a COUNT: fewer may have been there, so this is an upper bound.
      `Group "${group}" partition ${partition}: Redis closed the connection during a read of up to ${cut.count} entries ` +
      `(up to about ${size(cutBytes)} at ${size(this.perEntry!)} an entry); reading at most ${this.sized(Number.MAX_SAFE_INTEGER)} ` +
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

  /** The entries of an XREAD reply read as Buffers (bound once: no closure per read); their sizes go into the estimates. */
  private readonly decodeReply = (reply: XReadBufferReply): Entry[] => {
    this.left = 0;
    if (!reply || reply.length === 0) return [];
    return this.decodeEntries(reply[0][1]);
  };

  /** Entries as XRANGE answers them, read as Buffers; their sizes go into the estimates. */
  private decodeEntries(raw: Array<[id: Buffer, fields: Buffer[]]>): Entry[] {
    const entries = new Array<Entry>(raw.length);
    let bytes = 0;
    let largest = 0;
    for (let i = 0; i < raw.length; i++) {
      const [id, fields] = raw[i];
      const size = entryBytes(id, fields);
      bytes += size;
      if (size > largest) largest = size;
      entries[i] = readEntryBuffers(id, fields, this.origin);
    }
    this.observe(bytes, raw.length, Math.max(largest, this.left));
    return entries;
  }

  /**
   * A read while behind: plain XRANGE where the partition's index of big entries tells beforehand that
   * the reply fits the byte ceiling (`readIndexed`), else the byte-counting script.
   */
  private async readBehind(connection: Redis | Cluster, after: string, count: number, blockMs?: number): Promise<Entry[]> {
    const plain = this.indexedCount(after, count);
    if (plain > 0) {
      const expected = this.expected;
      this.expected = plain;
      const entries = await this.readIndexed(connection, after, plain);
      if (entries) return entries;
      this.expected = expected;
    }
    return this.readPacked(connection, after, count, blockMs);
  }

  /**
   * How many entries a plain read after `after` may ask for (0: the script reads): as many entries that
   * are not big as fit the ceiling, at most `count`, where the index is known to cover the partition from
   * there. Under `LEAST_PLAIN_READ` of them (a small ceiling), the script, which fits as many small
   * entries as there are, reads instead.
   */
  private indexedCount(after: string, count: number): number {
    if (!this.options.index || this.packedRefused) return 0;
    if (this.indexOffAt !== undefined) {
      if (performance.now() - this.indexOffAt < CEILING_HOLD_MS) return 0;
      this.indexOffAt = undefined;
    }
    if (this.unindexedUntil !== undefined && compareStreamIds(after, this.unindexedUntil) < 0) return 0;
    const fit = Math.min(count, Math.floor(this.ceiling / BIG_ENTRY_BYTES));
    return fit >= Math.min(count, LEAST_PLAIN_READ) ? fit : 0;
  }

  /**
   * Up to `count` entries after `after` with plain XRANGE, up to the region the index vouches for:
   * each entry there is at most BIG_ENTRY_BYTES, so `count` of them fit the ceiling. A big entry at the
   * region's end comes alone. Undefined when the index cannot tell (the script reads instead).
   */
  private async readIndexed(connection: Redis | Cluster, after: string, count: number): Promise<Entry[] | undefined> {
    let region = this.region;
    if (!region || compareStreamIds(after, region.start) < 0 || compareStreamIds(after, region.end) >= 0) {
      region = await this.askIndex(connection, after);
      if (!region) return undefined;
    }
    this.expectedBytes = this.ceiling;
    this.left = 0;
    let raw: Array<[Buffer, Buffer[]]>;
    try {
      raw = await EventrailScripts.readRange(connection, this.stream, after, `(${region.end}`, count);
    } catch (error) {
      if (!this.refused(error)) throw error;
      return undefined;
    }
    if (raw.length < count) {
      // The region ends here: more may follow it (behind stays), and the next read asks the index again.
      this.region = undefined;
      this.more = true;
    }
    if (raw.length === 0) {
      // Nothing before Redis's time (caught up, or ids ahead of its clock): the script tells which.
      if (!region.big) return undefined;
      return this.decodeEntries(await EventrailScripts.readRange(connection, this.stream, after, '+', 1));
    }
    const entries = this.decodeEntries(raw);
    if (raw.length > 1 && this.lastMean * raw.length > this.ceiling) this.offIndex(this.lastMean * raw.length, raw.length);
    return entries;
  }

  /** Asks where the big entries after `after` are (readIndex-3.lua): the region plain reads may cover, or undefined. */
  private async askIndex(connection: Redis | Cluster, after: string): Promise<Region | undefined> {
    let answer: { from: string; next: string; now: string };
    try {
      answer = await EventrailScripts.readIndex(connection, this.options.index!, after);
    } catch (error) {
      if (!this.refused(error)) throw error;
      return undefined;
    }
    const { from, next, now } = answer;
    if (from === 'none') {
      this.indexOffAt = performance.now();
      return undefined;
    }
    if (compareStreamIds(after, from) < 0) {
      this.unindexedUntil = from;
      return undefined;
    }
    const clock = `${now}-0`;
    const big = next !== '' && compareStreamIds(next, clock) < 0;
    return (this.region = { start: after, end: big ? next : clock, big });
  }

  /**
   * Whether `error` is Redis refusing the index's question or a plain read (an ACL without the script
   * or `XRANGE`, scripting off): an answer, not a failure of the read, so the script reads instead for
   * a while. Anything else (a busy or moving server, a lost connection) is the read's failure.
   */
  private refused(error: unknown): boolean {
    if (!(error instanceof Error && error.name === 'ReplyError') || TRANSIENT.test(error.message)) return false;
    this.indexOffAt = performance.now();
    this.region = undefined;
    return true;
  }

  /**
   * A plain read brought more than the ceiling: the partition holds big entries its index does not
   * know (a raw XADD, or a process of an older eventrail still publishing). The script reads it for a
   * while; said once.
   */
  private offIndex(bytes: number, entries: number): void {
    this.indexOffAt = performance.now();
    this.region = undefined;
    if (this.warnedUnindexed) return;
    this.warnedUnindexed = true;
    const { group } = this.options;
    const { partition } = this.origin;
    const text =
      `Group "${group}" partition ${partition}: a read of ${entries} entries brought ${size(bytes)}, over maxReadBytes ` +
      `(${size(this.ceiling)}): the partition holds entries over ${size(BIG_ENTRY_BYTES)} that its index of big entries does not know ` +
      `(appended by a raw XADD, or by a process of an older eventrail that does not index them). Reading it with the byte-counting script ` +
      `for a minute at a time until they are past`;
    this.logger.warn(logRecord(text, { group, partition, bytes: Math.round(bytes), entries }));
  }

  /** At most `count` entries and the byte ceiling's worth (one entry at least), read by the script; without `blockMs`, a fallback read does not wait. */
  private async readPacked(connection: Redis | Cluster, after: string, count: number, blockMs?: number): Promise<Entry[]> {
    let read: BacklogRead;
    this.expectedBytes = this.ceiling;
    try {
      read = await EventrailScripts.readBacklog(connection, this.stream, after, count, this.ceiling, Math.ceil(this.largest));
    } catch (error) {
      // A refusal is an answer: the connection is fine, the script is not welcome. Anything else is the read's failure.
      if (!(error instanceof Error && error.name === 'ReplyError') || TRANSIENT.test(error.message)) throw error;
      this.packedRefused = true;
      this.expectedBytes = Number.POSITIVE_INFINITY;
      this.logger.warn(`Reading ${this.stream} with XREAD only: the backlog read script was refused (${describeError(error)})`);
      return this.readBlocking(connection, after, this.sized(count), blockMs);
    }
    this.more = read.left > 0;
    this.left = read.left;
    return this.decodeEntries(read.entries);
  }

  private readBlocking(connection: Redis | Cluster, after: string, count: number, blockMs?: number): Promise<Entry[]> {
    return EventrailScripts.readStream(connection, this.stream, after, count, blockMs).then(this.decodeReply);
  }
}
