import { EventrailError } from '../../errors/eventrail.error';

/**
 * An `@EventPattern` handler failed with something that is not an `Error`:
 * usually Nest's exception filter reply (`{ status: 'error', message }`),
 * which is what Nest makes of a thrown error unless `EventrailExceptionFilter`
 * passes it through. Kept as `reply`; counts as a failed attempt like any error.
 */
export class HandlerReplyError extends EventrailError {
  constructor(
    readonly pattern: string,
    readonly reply: unknown,
  ) {
    super(`@EventPattern('${pattern}') failed: ${describeReply(reply)}`);
  }
}

function describeReply(reply: unknown): string {
  if (typeof reply === 'string') return reply;
  try {
    return JSON.stringify(reply) ?? String(reply);
  } catch {
    return 'a value that cannot be described';
  }
}
