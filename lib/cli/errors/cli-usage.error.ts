import { EventrailError } from '../../errors/eventrail.error';

/** The command line asks for something that cannot be done as written (exit code 2). */
export class CliUsageError extends EventrailError {
  constructor(message: string) {
    super(message);
  }
}
