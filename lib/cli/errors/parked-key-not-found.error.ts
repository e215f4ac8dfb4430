import { EventrailError } from '../../errors/eventrail.error';

/** The key named with `--key` has no parked line in the group (released, given up, mistyped, or never parked). */
export class ParkedKeyNotFoundError extends EventrailError {
  constructor(
    readonly group: string,
    readonly key: string,
  ) {
    super(`No parked line of key ${JSON.stringify(key)} in group "${group}" (released, given up, or never parked?)`);
  }
}
