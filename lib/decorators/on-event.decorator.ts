import { ON_EVENT_METADATA } from '../eventrail.constants';
import type { ConsumerOptions } from '../eventrail.options';
import type { EventRef } from '../events/event-definition';

export interface OnEventGroupOptions extends ConsumerOptions {
  /** Consumer group name: every group sees every event. */
  group: string;
}

/** One `@OnEvent` as written; validated at startup by the explorer, which can name the class. */
export interface OnEventDeclaration {
  member: string | symbol;
  isMethod: boolean;
  events: unknown;
  group: unknown;
  options: ConsumerOptions;
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
    const { group: name, ...options } = typeof group === 'object' && group !== null ? group : { group };
    const declaration: OnEventDeclaration = {
      member,
      isMethod: typeof descriptor?.value === 'function',
      events,
      group: name,
      options,
    };
    const existing = (Reflect.getOwnMetadata(ON_EVENT_METADATA, target.constructor) as OnEventDeclaration[] | undefined) ?? [];
    Reflect.defineMetadata(ON_EVENT_METADATA, [...existing, declaration], target.constructor);
  };
}
