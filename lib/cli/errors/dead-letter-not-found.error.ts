import { EventrailError } from '../../errors/eventrail.error';

/** Dead letters named on the command line are not in the group's dead-letter stream (replayed, purged or mistyped). */
export class DeadLetterNotFoundError extends EventrailError {
  constructor(
    readonly group: string,
    readonly ids: readonly string[],
  ) {
    super(`No dead letter ${ids.join(', ')} in group "${group}" (already replayed or purged?)`);
  }
}
