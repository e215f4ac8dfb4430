import { EventrailError } from './eventrail.error';

/**
 * The data of an event would not survive `JSON.stringify` unchanged. `path`
 * points at the offending value (`data.items[2].when`).
 */
export class InvalidEventDataError extends EventrailError {
  constructor(
    readonly eventName: string,
    readonly path: string,
    readonly reason: string,
  ) {
    super(`Event "${eventName}": ${path} ${reason}; event data must be plain JSON`);
  }
}
