import { EventrailError } from './eventrail.error';

/** `defineEvent` was given something that is not a Standard Schema (it has no `~standard.validate`). */
export class InvalidEventSchemaError extends EventrailError {
  constructor(readonly eventName: string) {
    super(
      `defineEvent("${eventName}"): the schema is not a Standard Schema (it has no ~standard.validate function); ` +
        'zod 3.24+, valibot 1, arktype 2 and others implement it',
    );
  }
}
