import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { EventrailMessage } from '../eventrail-message';
import type { ResolvedConsumerOptions } from '../eventrail.options';

/** One `@OnEvent` method bound to its provider instance. */
export interface HandlerBinding {
  /** `ClassName.method`, for logs. */
  name: string;
  call: (message: EventrailMessage) => unknown;
  /**
   * The schema of the event's `defineEvent`, when it has one: the group checks
   * the data with it before any handler of the event runs (one schema per
   * event and group; the explorer refuses two).
   */
  schema?: StandardSchemaV1;
}

/** Handlers of one group, by event type. Several methods may handle the same event. */
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
