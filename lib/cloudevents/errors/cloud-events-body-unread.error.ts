import { EventrailError } from '../../errors/eventrail.error';

/**
 * A request reached the CloudEvents ingress after another body parser had read its body (a path the ingress's
 * own reader did not recognise as its route): answered 500 rather than storing the event without its data.
 */
export class CloudEventsBodyUnreadError extends EventrailError {
  constructor(readonly path: string) {
    super(
      `The CloudEvents ingress got a request to "${path}" whose body another body parser had already read: ` +
        'nothing was appended (send it to the ingress path exactly)',
    );
  }
}
