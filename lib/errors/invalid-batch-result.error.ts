import { EventrailError } from './eventrail.error';

/**
 * A batch handler returned something that is not a `BatchResult` for the
 * batch it was given (`failed` not an array, or naming a message that was not
 * in the batch). The call counts as a failed attempt of the whole batch.
 */
export class InvalidBatchResultError extends EventrailError {
  constructor(
    readonly handler: string,
    readonly reason: string,
  ) {
    super(`${handler} returned an invalid BatchResult: ${reason}`);
  }
}
