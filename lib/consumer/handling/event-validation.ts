import type { StandardSchemaV1 } from '@standard-schema/spec';
import { EventValidationError } from '../../errors/event-validation.error';
import { checkAgainstSchema, SchemaOutcome } from '../../events/schema-check';
import { withTimeout } from '../../util/timeout';
import type { decodePayload } from '../../wire/codec';

/** A decoded payload, as the message processor hands it to handlers. */
type Payload = ReturnType<typeof decodePayload>;

/**
 * The payload a group's handlers of a typed event receive: the data as the
 * event's schema parsed it (its output, transforms and defaults applied), or
 * the `EventValidationError` listing why it does not match, which the
 * processor dead-letters at once with reason `invalid`: retrying cannot fix
 * data, and a producer in another language may have written anything.
 * Never throws, whatever the schema does.
 *
 * The check is part of the attempt, so `timeoutMs` (the group's
 * `handlerTimeoutMs`, when above 0) bounds it too: a check that has not
 * settled by then counts as refused, with an issue that says so, instead of
 * holding the partition (and a later shutdown) for as long as it hangs.
 */
export async function validatedPayload(
  schema: StandardSchemaV1,
  event: string,
  payload: Payload,
  timeoutMs = 0,
): Promise<Payload | EventValidationError> {
  const checking = checkAgainstSchema(schema, payload.data);
  const outcome: SchemaOutcome =
    timeoutMs > 0 && checking instanceof Promise
      ? await withTimeout(checking, timeoutMs, () => ({
          issues: [{ path: '(root)', message: `the schema check did not settle within handlerTimeoutMs (${timeoutMs} ms)` }],
        }))
      : await checking;
  if (outcome.issues) return new EventValidationError(event, outcome.issues);
  return { data: outcome.value, headers: payload.headers };
}
