import { EventrailError } from './eventrail.error';

/** An `@OnEvent` declaration cannot be used. Thrown at startup, naming the class and member. */
export class InvalidHandlerError extends EventrailError {
  constructor(
    readonly className: string,
    readonly member: string,
    readonly reason: string,
  ) {
    super(`@OnEvent on ${className}.${member}: ${reason}`);
  }
}
