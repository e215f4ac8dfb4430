import { EventrailError } from './eventrail.error';

/**
 * The process is configured with a partition count other than the one the log
 * was created with. Changing it would break per-key ordering, so startup stops.
 */
export class PartitionMismatchError extends EventrailError {
  constructor(
    readonly prefix: string,
    readonly configured: number,
    readonly recorded: number,
  ) {
    super(
      `The log "${prefix}" was created with partitions: ${recorded}, but this process is configured with partitions: ${configured}. ` +
        `Set partitions: ${recorded} (the count is fixed once the log exists).`,
    );
  }
}
