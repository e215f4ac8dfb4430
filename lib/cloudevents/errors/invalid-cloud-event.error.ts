import { EventrailError } from '../../errors/eventrail.error';

/** A CloudEvent that cannot become an eventrail event (or the reverse), naming the attribute that is wrong. */
export class InvalidCloudEventError extends EventrailError {
  constructor(
    readonly attribute: string,
    readonly reason: string,
  ) {
    super(`Invalid CloudEvent: ${attribute} ${reason}`);
  }
}
