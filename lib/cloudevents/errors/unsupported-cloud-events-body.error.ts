import { EventrailError } from '../../errors/eventrail.error';

/**
 * A CloudEvents request body the ingress cannot store as sent, answered 415: a `Content-Encoding` other than
 * `identity` (compressed bodies are not decoded), or a text charset other than UTF-8 (or its subset US-ASCII).
 * `header` names what was refused (`content-encoding` or `content-type`), `value` what it said.
 */
export class UnsupportedCloudEventsBodyError extends EventrailError {
  readonly statusCode = 415;

  constructor(
    readonly header: 'content-encoding' | 'content-type',
    readonly value: string,
  ) {
    super(
      header === 'content-encoding'
        ? `The CloudEvents ingress does not decode Content-Encoding "${value}": send the body uncompressed (identity)`
        : `The CloudEvents ingress stores text as UTF-8 only: charset "${value}" is not supported (send charset=utf-8)`,
    );
  }
}
