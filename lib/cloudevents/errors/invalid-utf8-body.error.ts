import { EventrailError } from '../../errors/eventrail.error';

/**
 * A CloudEvents request body that is not valid UTF-8, answered 400: eventrail stores data as JSON text, so bytes
 * that are no UTF-8 text (binary data included) would be altered. `offset` is the first invalid byte's.
 */
export class InvalidUtf8BodyError extends EventrailError {
  readonly statusCode = 400;

  constructor(readonly offset: number) {
    super(
      `The CloudEvents request body is not valid UTF-8 (first invalid byte at offset ${offset}): ` +
        'eventrail stores data as text and does not store binary data',
    );
  }
}
