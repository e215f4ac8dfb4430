import { EventValidationError } from '../errors/event-validation.error';
import { isEventDefinition } from './event-definition';
import { checkAgainstSchema, SchemaOutcome } from './schema-check';

/**
 * The event name of a publish call, once its data passed the schema of its
 * definition (a string name passes as it is; the publisher checks names
 * itself). Synchronous unless the schema is asynchronous, so a string or a
 * synchronous schema costs `publish` no extra tick. Throws (or rejects with)
 * `EventValidationError`; `index` is the event's place in a `publishMany`.
 *
 * The data is sent as given, not as the schema's output: consumers run the
 * same schema on it, and a transform's output need not pass its own input
 * schema again.
 */
export function publishedEventName(event: unknown, data: unknown, index?: number): string | Promise<string> {
  if (!isEventDefinition(event)) return event as string;
  const { name, schema } = event;
  if (schema === undefined) return name;
  const outcome = checkAgainstSchema(schema, data);
  if (!(outcome instanceof Promise)) return accepted(name, outcome, index);
  return outcome.then((checked) => accepted(name, checked, index));
}

/**
 * The names of a `publishMany` call's events, all checked before any is
 * sent. When several fail, the error names the lowest index, whatever the
 * order asynchronous schemas finish in.
 */
export function publishedEventNames(
  events: ReadonlyArray<{ event?: unknown; data?: unknown } | null | undefined>,
): string[] | Promise<string[]> {
  const names: Array<string | Promise<string>> = [];
  let pending = false;
  for (let i = 0; i < events.length; i++) {
    try {
      names.push(publishedEventName(events[i]?.event, events[i]?.data, i));
    } catch (error) {
      if (!pending) throw error;
      // An earlier asynchronous check may still fail: the lowest index wins.
      names.push(Promise.reject(error as Error));
    }
    pending ||= names[i] instanceof Promise;
  }
  if (!pending) return names as string[];
  return Promise.allSettled(names.map((name) => Promise.resolve(name))).then((settled) => {
    const failed = settled.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    return settled.map((result) => (result as PromiseFulfilledResult<string>).value);
  });
}

function accepted(name: string, outcome: SchemaOutcome, index: number | undefined): string {
  if (outcome.issues) throw new EventValidationError(name, outcome.issues, index);
  return name;
}
