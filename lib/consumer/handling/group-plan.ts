import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { EventrailMessage } from '../../events/eventrail-message';
import type { ResolvedConsumerOptions } from '../consumer.options';

/** A batch handler's sizing, resolved from `@OnEvent(..., { batch })`. */
export interface ResolvedBatchOptions {
  maxSize: number;
  maxWaitMs: number;
}

/** What a batch handler adds to its binding: its sizing, and the call that takes the whole batch. */
export interface BatchBinding extends ResolvedBatchOptions {
  /** `ClassName.method`, for logs and errors. */
  name: string;
  call: (messages: EventrailMessage[]) => unknown;
  /** The event's `defineEvent` schema, when it has one: each message is checked (and parsed) before the batch is formed. */
  schema?: StandardSchemaV1;
}

/** One `@OnEvent` method bound to its provider instance. */
export interface HandlerBinding {
  /** `ClassName.method`, for logs. */
  name: string;
  /**
   * Handles one message. For a batch handler, a call with a one-message batch
   * that fails when the handler reports the message in `failed`.
   */
  call: (message: EventrailMessage) => unknown;
  /** Set for a batch handler (`batch` in `@OnEvent`): the only handler of its events in the group. */
  batch?: BatchBinding;
  /**
   * The schema of the event's `defineEvent`, when it has one: the group checks
   * the data with it before any handler of the event runs (one schema per
   * event and group; the explorer refuses two).
   */
  schema?: StandardSchemaV1;
}

/** Handlers of one group, by event type. Several methods may handle the same event, unless one is a batch handler. */
export type HandlerMap = ReadonlyMap<string, readonly HandlerBinding[]>;

/**
 * What the explorer hands over for one consumer group: its handlers, and its
 * options resolved once (module `consumer`, then `groups.<name>`, then every
 * `@OnEvent` of the group, each validated where it was written).
 */
export interface GroupPlan {
  group: string;
  handlers: HandlerMap;
  options: ResolvedConsumerOptions;
}
