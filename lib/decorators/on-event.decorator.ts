import type { BatchOptions, ConsumerOptions } from '../consumer/consumer.options';
import type { EventRef } from '../events/event-definition';

export type { BatchOptions };

/** Metadata key under which `@OnEvent` records its declarations on a class. */
export const ON_EVENT_METADATA = 'eventrail:on-event';

export interface OnEventGroupOptions extends ConsumerOptions {
  /** Consumer group name: every group sees every event. */
  group: string;
  /**
   * Makes this method a batch handler (of this method only, unlike the other options, which apply to the
   * whole group). It may return a `BatchResult` naming the messages that failed.
   */
  batch?: BatchOptions;
}

/** One `@OnEvent` as written; validated at startup by the explorer, which can name the class. */
export interface OnEventDeclaration {
  member: string | symbol;
  isMethod: boolean;
  events: unknown;
  group: unknown;
  options: ConsumerOptions;
  /** `batch` as written, when given: this method's own, not the group's. */
  batch?: unknown;
}

/**
 * Handles `event` (or any of `events`, each a name or a `defineEvent`
 * definition, whose schema then checks the data before the handler runs) in
 * consumer group `group`. Only records
 * metadata: mistakes are reported at startup with the class and method name.
 *
 * Next to `@nestjs/event-emitter`, import it under another name:
 * `import { OnEvent as OnLogEvent } from 'nestjs-eventrail'`.
 */
export function OnEvent(events: EventRef | EventRef[], group: string | OnEventGroupOptions): MethodDecorator & PropertyDecorator {
  return (target: object, member: string | symbol, descriptor?: PropertyDescriptor) => {
    const { group: name, batch, ...options } = typeof group === 'object' && group !== null ? group : { group, batch: undefined };
    const declaration: OnEventDeclaration = {
      member,
      isMethod: typeof descriptor?.value === 'function',
      events,
      group: name,
      options,
      ...(batch !== undefined && { batch }),
    };
    const existing = (Reflect.getOwnMetadata(ON_EVENT_METADATA, target.constructor) as OnEventDeclaration[] | undefined) ?? [];
    Reflect.defineMetadata(ON_EVENT_METADATA, [...existing, declaration], target.constructor);
  };
}
