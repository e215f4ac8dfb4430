import { EventrailError } from './eventrail.error';

/** One reason an event's data failed its schema: where (`items[2].sku`, `(root)` for the data itself) and what. */
export interface EventValidationIssue {
  path: string;
  message: string;
}

/**
 * An event's data does not match the schema of its `defineEvent`. Thrown by
 * `publish` / `publishMany` before anything is sent; recorded in the dead
 * letter (reason `invalid`) when a consumer reads such an entry. `index` is
 * the position of the refused event in a `publishMany` call.
 */
export class EventValidationError extends EventrailError {
  constructor(
    readonly eventName: string,
    readonly issues: readonly EventValidationIssue[],
    readonly index?: number,
  ) {
    const where = index === undefined ? `Event "${eventName}"` : `events[${index}] ("${eventName}")`;
    super(`${where}: data does not match the event's schema: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`);
  }
}
