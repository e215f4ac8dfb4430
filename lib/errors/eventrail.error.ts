/**
 * Base class of every error this library throws on purpose. Catch it to tell
 * eventrail's own refusals apart from anything else.
 */
export class EventrailError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}
