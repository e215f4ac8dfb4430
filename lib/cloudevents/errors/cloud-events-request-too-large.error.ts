import { EventrailError } from '../../errors/eventrail.error';

/**
 * A request to the CloudEvents ingress whose body is larger than the ingress reads: `maxPayloadBytes` plus
 * room for the attributes. `bytes` is the declared `Content-Length`, or null when the body was sent in
 * chunks without one (reading stopped at the limit).
 */
export class CloudEventsRequestTooLargeError extends EventrailError {
  constructor(
    readonly bytes: number | null,
    readonly maxBytes: number,
    readonly maxPayloadBytes: number,
  ) {
    super(
      `The CloudEvents request body is ${bytes === null ? `over ${maxBytes}` : bytes} bytes, over the ingress's limit of ${maxBytes} bytes ` +
        `(maxPayloadBytes, ${maxPayloadBytes}, plus ${maxBytes - maxPayloadBytes} for the attributes)`,
    );
  }
}
