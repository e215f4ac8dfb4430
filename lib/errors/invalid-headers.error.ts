import { EventrailError } from './eventrail.error';

/** Event headers must be an object of string names to string values. */
export class InvalidHeadersError extends EventrailError {
  constructor(
    readonly eventName: string,
    readonly header: string,
    readonly reason: string,
  ) {
    super(`Event "${eventName}": header ${header} ${reason}; headers must map strings to strings`);
  }
}
