import { EventrailError } from '../../errors/eventrail.error';

/** No log was ever created at the prefix: a typo in `--prefix` is likelier than an empty log, so reads refuse. */
export class LogNotFoundError extends EventrailError {
  constructor(
    readonly prefix: string,
    readonly redis: string,
  ) {
    super(`No eventrail log with prefix "${prefix}" at ${redis} (check --prefix / EVENTRAIL_PREFIX; publishing creates the log)`);
  }
}
