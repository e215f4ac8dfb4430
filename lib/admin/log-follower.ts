import type { Cluster, Redis } from 'ioredis';
import { BLOCK_MS, XReadReply } from '../redis/stream-read';
import type { EventrailRedis } from '../redis/eventrail-redis';
import type { FollowOptions, LogEntry } from './admin.types';
import { toLogEntry } from './log-entry';

/** Entries per XREAD. */
const READ_COUNT = 500;
/** Readers stop reading while this many entries wait for the consumer, and go on below half of it. */
const HIGH_WATER = 2_000;

/**
 * The live tail behind `EventrailAdmin.follow`: every partition from where
 * it ends now. Readers wait in `XREAD BLOCK` on connections of their own (one
 * on a single Redis; one per partition on a cluster, where a read spans one
 * slot). A hand-written iterator rather than an async generator, so that
 * `return()` (a `break`, an unsubscribe) stops it at once even while a
 * `next()` waits on an idle log.
 */
export class LogFollower implements AsyncIterableIterator<LogEntry> {
  private readonly wanted: ReadonlySet<string> | null;
  private readonly queue: LogEntry[] = [];
  private readonly connections: Array<Redis | Cluster> = [];
  private readonly loops: Array<Promise<void>> = [];
  private waitingReaders: Array<() => void> = [];
  private waitingConsumers: Array<() => void> = [];
  /** Ends the reads in flight on stop: one queued on a connection that is down would otherwise never settle. */
  private readonly cancels = new Set<() => void>();
  private started?: Promise<void>;
  private running = 0;
  private stopped = false;
  private failure: unknown;

  constructor(
    private readonly redis: EventrailRedis,
    private readonly options: FollowOptions,
  ) {
    this.wanted = options.events && options.events.length > 0 ? new Set(options.events) : null;
    if (options.signal?.aborted) this.stop();
    else options.signal?.addEventListener('abort', this.stop, { once: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  async next(): Promise<IteratorResult<LogEntry>> {
    this.started ??= this.start();
    try {
      await this.started;
    } catch (error) {
      await this.close();
      throw error;
    }
    for (;;) {
      const entry = this.queue.shift();
      if (entry) {
        if (this.queue.length < HIGH_WATER / 2) this.releaseReaders();
        return { value: entry, done: false };
      }
      if (this.failure !== undefined) {
        const failure = this.failure;
        await this.close();
        throw failure;
      }
      if (this.stopped || this.running === 0) {
        await this.close();
        return { value: undefined, done: true };
      }
      await new Promise<void>((resolve) => this.waitingConsumers.push(resolve));
    }
  }

  async return(): Promise<IteratorResult<LogEntry>> {
    await this.close();
    return { value: undefined, done: true };
  }

  private async start(): Promise<void> {
    const { keys, client, isCluster } = this.redis;
    const lastIds = await Promise.all(
      keys.streams.map(async (stream) => (await client.xrevrange(stream, '+', '-', 'COUNT', 1))[0]?.[0] ?? '0-0'),
    );
    if (this.stopped) return;
    this.options.onListening?.();
    const all = keys.streams.map((_, p) => p);
    for (const partitions of isCluster ? all.map((p) => [p]) : [all]) {
      const connection = this.redis.duplicate();
      this.connections.push(connection);
      this.running++;
      const loop = this.read(connection, partitions, lastIds)
        .catch((error: unknown) => {
          if (!this.stopped) this.failure ??= error;
        })
        .finally(() => {
          this.running--;
          this.wakeConsumers();
        });
      this.loops.push(loop);
    }
  }

  private async read(connection: Redis | Cluster, partitions: number[], lastIds: string[]): Promise<void> {
    const streams = partitions.map((p) => this.redis.keys.stream(p));
    const byStream = new Map(partitions.map((p, i) => [streams[i], p]));
    while (!this.stopped && this.failure === undefined) {
      if (this.queue.length >= HIGH_WATER) {
        await new Promise<void>((resolve) => this.waitingReaders.push(resolve));
        continue;
      }
      const ids = partitions.map((p) => lastIds[p]);
      // Each stream may return COUNT entries: share the room left under the high-water mark between them.
      const count = Math.min(READ_COUNT, Math.max(1, Math.floor((HIGH_WATER - this.queue.length) / streams.length)));
      const read = connection.xread('COUNT', count, 'BLOCK', BLOCK_MS, 'STREAMS', ...streams, ...ids) as Promise<XReadReply>;
      const reply = await this.unlessStopped(read);
      if (this.stopped) return;
      for (const [stream, entries] of reply ?? []) {
        const partition = byStream.get(stream) as number;
        for (const [offset, fields] of entries) {
          const entry = toLogEntry({ partition, logTag: this.redis.keys.logTag }, offset, fields);
          if (!this.wanted || (entry.event !== null && this.wanted.has(entry.event))) this.queue.push(entry);
        }
        if (entries.length > 0) lastIds[partition] = entries[entries.length - 1][0];
      }
      this.wakeConsumers();
    }
  }

  private readonly stop = (): void => {
    this.stopped = true;
    for (const cancel of this.cancels) cancel();
    this.cancels.clear();
    for (const connection of this.connections) connection.disconnect();
    this.releaseReaders();
    this.wakeConsumers();
  };

  private async close(): Promise<void> {
    this.options.signal?.removeEventListener('abort', this.stop);
    this.stop();
    this.queue.length = 0;
    await Promise.all(this.loops);
  }

  /** `read`'s outcome, or null at once when the follower stops first. */
  private unlessStopped(read: Promise<XReadReply>): Promise<XReadReply> {
    return new Promise<XReadReply>((resolve, reject) => {
      const cancel = (): void => resolve(null);
      this.cancels.add(cancel);
      read.then(resolve, reject).finally(() => this.cancels.delete(cancel));
    });
  }

  private wakeConsumers(): void {
    const waiting = this.waitingConsumers;
    this.waitingConsumers = [];
    for (const resolve of waiting) resolve();
  }

  private releaseReaders(): void {
    const waiting = this.waitingReaders;
    this.waitingReaders = [];
    for (const resolve of waiting) resolve();
  }
}
