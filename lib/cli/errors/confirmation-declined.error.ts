import { EventrailError } from '../../errors/eventrail.error';

/** The operator answered no at a confirmation prompt; nothing was changed. */
export class ConfirmationDeclinedError extends EventrailError {
  constructor(readonly operation: string) {
    super(`Not confirmed: did not ${operation}; nothing was changed`);
  }
}
