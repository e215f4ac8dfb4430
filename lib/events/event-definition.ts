import type { StandardSchemaV1 } from '@standard-schema/spec';
import { InvalidEventSchemaError } from '../errors/invalid-event-schema.error';
import { validateEventName } from './validate-event';

/** Marks the objects `defineEvent` made, so a plain `{ name }` is never taken for one. */
const DEFINITION = Symbol.for('nestjs-eventrail.event-definition');

/**
 * An event type with its name and, optionally, the Standard Schema its data
 * follows (zod, valibot, arktype, ...). Made by `defineEvent`; pass it to
 * `publish`, `publishMany` and `@OnEvent` wherever an event name goes.
 */
export interface EventDefinition<Name extends string = string, Schema extends StandardSchemaV1 | undefined = StandardSchemaV1 | undefined> {
  readonly name: Name;
  readonly schema: Schema;
  readonly [DEFINITION]: true;
}

/** The data a handler of `D` receives: the schema's output (after its transforms and defaults). */
export type EventData<D extends EventDefinition> = D['schema'] extends StandardSchemaV1
  ? StandardSchemaV1.InferOutput<D['schema']>
  : unknown;

/** The data `publish` accepts for `D`: the schema's input. */
export type EventInput<D extends EventDefinition> = D['schema'] extends StandardSchemaV1
  ? StandardSchemaV1.InferInput<D['schema']>
  : unknown;

/** An event given by name or by its definition. */
export type EventRef = string | EventDefinition;

/**
 * Defines an event type once, for the producer and the handlers:
 * `export const PaymentCompleted = defineEvent('payment.completed', z.object({ ... }))`.
 * The name is checked here, as `publish` would (a bad one fails at import, not at the first publish).
 * Without a schema the definition only names the event.
 */
export function defineEvent<const Name extends string>(name: Name): EventDefinition<Name, undefined>;
export function defineEvent<const Name extends string, Schema extends StandardSchemaV1>(
  name: Name,
  schema: Schema,
): EventDefinition<Name, Schema>;
export function defineEvent(name: string, schema?: StandardSchemaV1): EventDefinition {
  validateEventName(name);
  if (schema !== undefined && typeof (schema as Partial<StandardSchemaV1> | null)?.['~standard']?.validate !== 'function') {
    throw new InvalidEventSchemaError(name);
  }
  return Object.freeze({ name, schema, [DEFINITION]: true as const });
}

export function isEventDefinition(value: unknown): value is EventDefinition {
  return typeof value === 'object' && value !== null && (value as Partial<EventDefinition>)[DEFINITION] === true;
}

/** The name and schema an `@OnEvent` or `publish` argument stands for (the name still to be validated). */
export function eventOf(ref: unknown): { name: unknown; schema?: StandardSchemaV1 } {
  return isEventDefinition(ref) ? { name: ref.name, schema: ref.schema } : { name: ref };
}
