import { EventrailError } from './eventrail.error';

/** Recorded in a dead letter of reason `max-deliveries`: the entry crashed every worker that took it, too often. */
export class CrashLoopError extends EventrailError {
  constructor(
    readonly deliveries: number,
    readonly maxDeliveries: number,
  ) {
    super(`delivered ${deliveries} times to workers that died before finishing it (maxDeliveries ${maxDeliveries})`);
  }
}
