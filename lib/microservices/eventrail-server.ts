import { Logger } from '@nestjs/common';
import { Server, type CustomTransportStrategy, type MessageHandler } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { EventrailConsumers } from '../consumer/lifecycle/eventrail-consumers';
import type { HandlerBinding } from '../consumer/handling/group-plan';
import type { EventrailMessage } from '../events/eventrail-message';
import type { ResolvedEventrailOptions } from '../module/eventrail.options';
import { EventrailError } from '../errors/eventrail.error';
import { HandlerReplyError } from './errors/handler-reply.error';
import { InvalidPatternError } from './errors/invalid-pattern.error';
import { RequestResponseNotSupportedError } from './errors/request-response-not-supported.error';
import { validateEventName } from '../events/validate-event';
import { EventrailRedis } from '../redis/eventrail-redis';
import { isError } from '../util/describe-error';
import { EventrailContext } from './eventrail-context';
import { resolveServerOptions, type EventrailServerOptions } from './transport.options';

/**
 * The transport id of `EventrailServer`. Give it to `@EventPattern(pattern, EVENTRAIL_TRANSPORT)` in an app
 * with several microservices to bind a handler to this transport only (handlers without one bind to all).
 */
export const EVENTRAIL_TRANSPORT = Symbol.for('nestjs-eventrail');

type ServerStatus = 'connecting' | 'connected' | 'disconnected';

/**
 * A @nestjs/microservices transport whose `@EventPattern` handlers run as one
 * eventrail consumer group (`group`), with everything an `@OnEvent` group has:
 * committed offsets, fenced leases shared with the group's other processes,
 * per-key order, retries in place with backoff, dead letters.
 *
 * Each pattern becomes one handler of the group for the event of that name.
 * Nest's proxy (pipes, guards, interceptors, exception filters) is what is
 * called, and the attempt is done when the handler's result (a value, a
 * promise or an observable) completes; a throw, a rejection or an errored
 * stream is a failed attempt and takes eventrail's retry path.
 */
export class EventrailServer extends Server<Record<string, never>, ServerStatus> implements CustomTransportStrategy {
  override readonly transportId = EVENTRAIL_TRANSPORT;
  /** The attempt awaits the handler's stream and reports failures itself (retries, dead letters). */
  override readonly propagatesEventHandlerErrors = true;
  protected override readonly logger = new Logger(EventrailServer.name);
  private readonly group: string;
  private readonly options: ResolvedEventrailOptions;
  private redis?: EventrailRedis;
  private consumers?: EventrailConsumers;
  /** Moves on at every close, so a start still waiting for Redis gives up instead of going on for a closed app. */
  private generation = 0;
  /** Ends the current start's wait for Redis at once (set while it waits). */
  private abandonStart?: () => void;
  /** The close under way, which a close called meanwhile waits for too. */
  private closing?: Promise<void>;

  constructor(options: EventrailServerOptions) {
    super();
    ({ group: this.group, resolved: this.options } = resolveServerOptions(options));
  }

  /** Joins the group with the registered `@EventPattern` handlers and starts consuming; `callback` gets the error if that fails. */
  async listen(callback: (error?: unknown) => void): Promise<void> {
    try {
      await this.start();
    } catch (error) {
      callback(error);
      return;
    }
    callback();
  }

  /**
   * Stops consuming as a Nest shutdown does: running handlers finish, offsets are committed, leases released.
   * A `listen()` still waiting for Redis stops waiting and starts nothing (its callback gets no error).
   */
  async close(): Promise<void> {
    this.generation++;
    this.abandonStart?.();
    const { consumers, redis } = this;
    this.consumers = undefined;
    this.redis = undefined;
    // A second caller (a signal handler and the app's own close, say) resolves only once the first close's
    // running handlers have finished too, not as soon as it finds nothing left to stop.
    const earlier = this.closing;
    const stopping = (async () => {
      await consumers?.stop();
      await redis?.onApplicationShutdown();
    })();
    const closing = Promise.all([earlier, stopping]).then(() => undefined);
    this.closing = closing;
    try {
      await closing;
    } finally {
      if (this.closing === closing) this.closing = undefined;
    }
    this._status$.next('disconnected');
  }

  /** The consumers of this server (worker id, ownership, stats, `whenRunning()`), once listening. */
  unwrap<T = EventrailConsumers>(): T {
    if (!this.consumers) throw new Error('EventrailServer is not listening yet: call it after app.listen() / startAllMicroservices()');
    return this.consumers as T;
  }

  /** The transport emits no events of its own; status changes are on `status`. */
  on(): never {
    throw new Error('EventrailServer has no events to listen to; subscribe to server.status instead');
  }

  private async start(): Promise<void> {
    const handlers = this.plan();
    const generation = this.generation;
    const open = (): boolean => generation === this.generation;
    this._status$.next('connecting');
    const redis = new EventrailRedis(this.options);
    // Known before it answers, so a close meanwhile disconnects it rather than leaving it to reconnect.
    this.redis = redis;
    let abandon: () => void = () => undefined;
    const closed = new Promise<void>((resolve) => (abandon = resolve));
    this.abandonStart = abandon;
    try {
      // Fails within startupTimeoutMs with RedisUnavailableError (and disconnects) when Redis does not answer.
      await Promise.race([redis.onModuleInit(), closed]);
    } finally {
      // A start made after a close has its own: this one must not clear it.
      if (this.abandonStart === abandon) this.abandonStart = undefined;
    }
    if (!open()) return;
    const consumers = new EventrailConsumers(redis, this.options);
    if (handlers.size > 0) consumers.register({ group: this.group, handlers, options: this.options.consumer });
    this.consumers = consumers;
    // A close during this start stops the consumers, which then undo what the start took.
    await consumers.start();
    if (open()) this._status$.next('connected');
  }

  /** One eventrail handler per `@EventPattern`; Nest already chains several methods of one pattern into one handler. */
  private plan(): Map<string, HandlerBinding[]> {
    const handlers = new Map<string, HandlerBinding[]>();
    for (const [pattern, handler] of this.getHandlers()) {
      if (!handler.isEventHandler) throw new RequestResponseNotSupportedError(pattern, '@MessagePattern');
      try {
        validateEventName(pattern);
      } catch (error) {
        if (error instanceof EventrailError) throw new InvalidPatternError(pattern, error.message);
        throw error;
      }
      handlers.set(pattern, [{ name: `@EventPattern('${pattern}')`, call: (message) => this.attempt(pattern, handler, message) }]);
    }
    return handlers;
  }

  /**
   * One attempt: Nest's handler between the processing hooks (which tracing
   * instrumentation sets), awaited to the end of its stream, as Nest's Kafka
   * transport does.
   */
  private attempt(pattern: string, handler: MessageHandler, message: EventrailMessage): Promise<void> {
    const context = new EventrailContext([message]);
    return new Promise<void>((resolve, reject) => {
      const run = async (): Promise<void> => {
        try {
          const stream = this.transformToObservable(await handler(message.data, context));
          await lastValueFrom(stream, { defaultValue: undefined });
          resolve();
        } catch (error) {
          reject(isError(error) ? error : new HandlerReplyError(pattern, error));
        } finally {
          this.onProcessingEndHook?.(this.transportId, context);
        }
      };
      // Older Nest versions have no processing hooks: then the attempt simply runs.
      const startHook = this.onProcessingStartHook as typeof this.onProcessingStartHook | undefined;
      if (startHook) startHook.call(this, this.transportId, context, run);
      else void run();
    });
  }
}
