import { EventrailError } from './eventrail.error';

/** An entry whose fields or payload cannot be decoded; retrying cannot help, so it is dead-lettered as `malformed`. */
export class DecodeError extends EventrailError {
  constructor(readonly reason: string) {
    super(reason);
  }
}
