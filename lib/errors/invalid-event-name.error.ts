import { EventrailError } from './eventrail.error';

/** `publish` was given an event name that is empty, too long or has control characters. */
export class InvalidEventNameError extends EventrailError {
  constructor(
    readonly eventName: unknown,
    readonly reason: string,
  ) {
    super(`Invalid event name ${JSON.stringify(String(eventName))}: ${reason}`);
  }
}
