import { EventrailError } from '../../errors/eventrail.error';

/** An `@EventPattern` of an `EventrailServer` cannot be used as an event name. Thrown when the microservice starts listening. */
export class InvalidPatternError extends EventrailError {
  constructor(
    readonly pattern: string,
    readonly reason: string,
  ) {
    super(`@EventPattern(${JSON.stringify(pattern)}) on the eventrail transport: ${reason}`);
  }
}
