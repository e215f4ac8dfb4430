import { EventrailError } from './eventrail.error';

/** The encoded data of an event is larger than `maxPayloadBytes`. */
export class PayloadTooLargeError extends EventrailError {
  constructor(
    readonly eventName: string,
    readonly bytes: number,
    readonly maxBytes: number,
  ) {
    super(`Event "${eventName}": data is ${bytes} bytes, over maxPayloadBytes (${maxBytes})`);
  }
}
