import { EventrailError } from './eventrail.error';

/** An admin call named a group that never registered in this log. */
export class UnknownGroupError extends EventrailError {
  constructor(readonly group: string) {
    super(`Unknown consumer group "${group}": no worker of it ever registered in this log`);
  }
}
