import { ClientProxy, type ReadPacket, type WritePacket } from '@nestjs/microservices';
import { throwError, type Observable } from 'rxjs';
import type { ResolvedEventrailOptions } from '../module/eventrail.options';
import { ClientClosedError } from './errors/client-closed.error';
import { RequestResponseNotSupportedError } from './errors/request-response-not-supported.error';
import { EventrailPublisher, type PublishResult } from '../publisher/eventrail.publisher';
import { EventrailRedis } from '../redis/eventrail-redis';
import { EventrailRecord } from './eventrail-record';
import { resolveClientOptions, type EventrailClientOptions } from './transport.options';

/**
 * A @nestjs/microservices client that appends to an eventrail log.
 * `emit(pattern, data)` publishes an event named `pattern` and completes (with
 * the `PublishResult`) once Redis acknowledged the append; it errors with the
 * publisher's typed errors (`RedisUnavailableError`, `InvalidEventNameError`,
 * `PayloadTooLargeError`, ...). Wrap the data in an `EventrailRecord` to set
 * the key, headers or id. `send` is refused: a log is not request/response.
 * `status` emits 'connecting', 'connected' and 'disconnected'.
 */
export class EventrailClient extends ClientProxy {
  private readonly options: ResolvedEventrailOptions;
  private redis?: EventrailRedis;
  private publisher?: EventrailPublisher;
  private connecting?: Promise<EventrailPublisher>;
  /** The connection of a connect still waiting for Redis, which a close disconnects. */
  private pending?: EventrailRedis;
  /** Ends the current connect's wait for Redis at once (set while it waits). */
  private abandonConnect?: () => void;

  constructor(options: EventrailClientOptions = {}) {
    super();
    this.options = resolveClientOptions(options);
  }

  /**
   * Connects to Redis and checks the log (partition count); rejects with `RedisUnavailableError` after
   * `startupTimeoutMs`, or with `ClientClosedError` if `close()` is called meanwhile.
   */
  connect(): Promise<EventrailPublisher> {
    if (this.connecting) return this.connecting;
    const connecting = this.open().catch((error: unknown) => {
      // The next emit tries again (unless a close or a newer connect already took over).
      if (this.connecting === connecting) {
        this.connecting = undefined;
        this._status$.next('disconnected');
      }
      throw error;
    });
    this.connecting = connecting;
    return connecting;
  }

  /** Disconnects; a `connect()` still waiting for Redis fails with `ClientClosedError` and leaves no connection. */
  async close(): Promise<void> {
    this.abandonConnect?.();
    const connections = [this.redis, this.pending].filter((redis): redis is EventrailRedis => redis !== undefined);
    this.connecting = undefined;
    this.redis = undefined;
    this.pending = undefined;
    this.publisher = undefined;
    await Promise.all(connections.map((redis) => redis.onApplicationShutdown()));
    this._status$.next('disconnected');
  }

  private async open(): Promise<EventrailPublisher> {
    this._status$.next('connecting');
    const redis = new EventrailRedis(this.options);
    this.pending = redis;
    let closed = false;
    let abandon: () => void = () => undefined;
    const abandoned = new Promise<void>((resolve) => {
      abandon = () => {
        closed = true;
        resolve();
      };
    });
    this.abandonConnect = abandon;
    try {
      await Promise.race([redis.onModuleInit(), abandoned]);
    } finally {
      // A connect made after a close (in the same tick, say) has its own: this one must not clear it.
      if (this.abandonConnect === abandon) this.abandonConnect = undefined;
      if (this.pending === redis) this.pending = undefined;
    }
    if (closed) throw new ClientClosedError();
    this.redis = redis;
    this.publisher = new EventrailPublisher(redis, this.options);
    this._status$.next('connected');
    return this.publisher;
  }

  /** The ioredis client (`Redis` or `Cluster`), once connected. */
  unwrap<T>(): T {
    if (!this.redis) throw new Error('EventrailClient is not connected yet: call connect() or emit first');
    return this.redis.client as T;
  }

  /** Refused: a log has no reply channel (see `RequestResponseNotSupportedError`). */
  override send<TResult = unknown>(pattern: unknown): Observable<TResult> {
    return throwError(() => new RequestResponseNotSupportedError(this.normalizePattern(pattern as string), 'send'));
  }

  protected publish(packet: ReadPacket, callback: (packet: WritePacket) => void): () => void {
    callback({ err: new RequestResponseNotSupportedError(this.normalizePattern(packet.pattern as string), 'send') });
    return () => undefined;
  }

  protected async dispatchEvent<T = PublishResult>(packet: ReadPacket): Promise<T> {
    const publisher = this.publisher ?? (await this.connect());
    const event = this.normalizePattern(packet.pattern as string);
    const record = packet.data instanceof EventrailRecord ? (packet.data as EventrailRecord) : undefined;
    const data: unknown = record ? record.data : packet.data;
    const { key, id } = record?.options ?? {};
    // Metadata set by a dispatch hook (Nest 12) travels as headers, under the record's own.
    const headers = packet.metadata || record?.options.headers ? { ...packet.metadata, ...record?.options.headers } : undefined;
    return (await publisher.publish(event, data, { key, id, headers })) as T;
  }
}
