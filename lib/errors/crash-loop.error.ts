import { EventrailError } from './eventrail.error';

/**
 * Recorded in a dead letter of reason `max-deliveries`: the entry was started too often by workers that
 * never finished it: they crashed, or stalled so long that another process took the partition.
 */
export class CrashLoopError extends EventrailError {
  constructor(
    readonly deliveries: number,
    readonly maxDeliveries: number,
  ) {
    super(
      `delivered ${deliveries} times to workers that did not finish it (they crashed, or stalled past lockTtlMs and another worker took over) (maxDeliveries ${maxDeliveries})`,
    );
  }
}
