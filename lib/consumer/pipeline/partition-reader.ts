import { Logger } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
import type { EntryOrigin, MalformedEntry, RawEntry } from '../../wire/codec';
import { readEntryBuffers, readPackedEntries } from '../../wire/entry-reader';
import { XReadBufferReply } from '../../redis/stream-read';
import { EventrailScripts } from '../../redis/eventrail-scripts';
import { describeError } from '../../util/describe-error';

type Entry = RawEntry | MalformedEntry;

/** Replies that say the server is busy or moving, not that the script is unwelcome: the read failed, and is retried as any read. */
const TRANSIENT = /^(?:LOADING|BUSY|TRYAGAIN|CLUSTERDOWN|MASTERDOWN|READONLY|MOVED|ASK|OOM)\b/;

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
 */
export class PartitionReader {
  private readonly logger = new Logger(PartitionReader.name);
  /** The last read came back full: the stream has more right away. */
  private behind = false;
  /** The server refused the packed read (no Lua `cmsgpack`, say): read with XREAD only, from then on. */
  private packedRefused = false;

  constructor(
    private readonly stream: string,
    private readonly origin: EntryOrigin,
    /** The group's `packedBacklogReads`: false reads with XREAD only. */
    packed = true,
  ) {
    this.packedRefused = !packed;
  }

  /**
   * Up to `count` entries after `after`, waiting up to `blockMs` for the first when caught up.
   * Chained promises, not async functions: at a low rate this runs once per event, and each async
   * frame added a promise and microtask hops between the reply and the handler (without the two it
   * had, and the worker's own, the latency consumer used 4.5–6 ms less CPU per 1000 events).
   */
  read(connection: Redis | Cluster, after: string, count: number, blockMs: number): Promise<Entry[]> {
    let reading: Promise<Entry[]>;
    try {
      reading =
        this.behind && !this.packedRefused
          ? this.readPacked(connection, after, count, blockMs)
          : this.readBlocking(connection, after, count, blockMs);
    } catch (error) {
      return Promise.reject(error);
    }
    this.count = count;
    return reading.then(this.readDone);
  }

  /** `count` of the read in flight (one at a time), for `readDone`. */
  private count = 0;

  private readonly readDone = (entries: Entry[]): Entry[] => {
    this.behind = entries.length >= this.count;
    return entries;
  };

  /** The entries of an XREAD reply read as Buffers (bound once: no closure per read). */
  private readonly decodeReply = (reply: XReadBufferReply): Entry[] => {
    if (!reply || reply.length === 0) return [];
    const raw = reply[0][1];
    const entries = new Array<Entry>(raw.length);
    for (let i = 0; i < raw.length; i++) entries[i] = readEntryBuffers(raw[i][0], raw[i][1], this.origin);
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
    return readPackedEntries(packed, this.origin);
  }

  private readBlocking(connection: Redis | Cluster, after: string, count: number, blockMs: number): Promise<Entry[]> {
    return EventrailScripts.readStream(connection, this.stream, after, count, blockMs).then(this.decodeReply);
  }
}
