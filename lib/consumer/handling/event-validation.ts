import type { StandardSchemaV1 } from '@standard-schema/spec';
import { EventValidationError } from '../../errors/event-validation.error';
import { checkAgainstSchema, SchemaOutcome } from '../../events/schema-check';
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
 */
export async function validatedPayload(schema: StandardSchemaV1, event: string, payload: Payload): Promise<Payload | EventValidationError> {
  const outcome: SchemaOutcome = await checkAgainstSchema(schema, payload.data);
  if (outcome.issues) return new EventValidationError(event, outcome.issues);
  return { data: outcome.value, headers: payload.headers };
}
