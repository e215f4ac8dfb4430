import type { EventrailMessage } from '../eventrail-message';

/** One `@OnEvent` method bound to its provider instance. */
export interface HandlerBinding {
  /** `ClassName.method`, for logs. */
  name: string;
  call: (message: EventrailMessage) => unknown;
}

/** Handlers of one group, by event type. Several methods may handle the same event. */
export type HandlerMap = ReadonlyMap<string, readonly HandlerBinding[]>;
