import { EventrailError } from './eventrail.error';

/** An option given to `publish` (key, id, partition) is not valid. */
export class InvalidPublishOptionsError extends EventrailError {
  constructor(
    readonly eventName: string,
    readonly option: string,
    readonly reason: string,
  ) {
    super(`Event "${eventName}": option ${option} ${reason}`);
  }
}
