import { EventrailError } from './eventrail.error';

/** A handler did not settle within `handlerTimeoutMs`; the attempt counts as failed (the handler is not cancelled). */
export class HandlerTimeoutError extends EventrailError {
  constructor(
    readonly handler: string,
    readonly timeoutMs: number,
  ) {
    super(`${handler} did not settle within handlerTimeoutMs (${timeoutMs} ms)`);
  }
}
