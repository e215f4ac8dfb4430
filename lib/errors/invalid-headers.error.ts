import { EventrailError } from './eventrail.error';

/**
 * Event headers must be a plain object of at most 64 string values, with names
 * of 1 to 256 bytes free of control characters and values of at most 8 KiB.
 * `header` is the offending name, quoted (`(all)` when the object itself is wrong).
 */
export class InvalidHeadersError extends EventrailError {
  constructor(
    readonly eventName: string,
    readonly header: string,
    readonly reason: string,
  ) {
    super(`Event "${eventName}": header ${header} ${reason}`);
  }
}
