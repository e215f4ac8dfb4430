import { EventrailError } from './eventrail.error';

/**
 * A dead letter a replay cannot turn back into the entry it was made from: its
 * stored fields are not what eventrail writes (edited or written by hand). The
 * replay stops before it claims or appends anything of that letter's page;
 * `done` is how many letters the pages before it replayed.
 */
export class InvalidDeadLetterError extends EventrailError {
  constructor(
    readonly group: string,
    /** The dead letter's id in the group's dead-letter stream. */
    readonly id: string,
    /** What is wrong with it, such as `its field "offset" is missing or not a stream id`. */
    readonly reason: string,
    /** Letters replayed before the replay reached this one. */
    readonly done = 0,
  ) {
    super(
      `Dead letter ${id} of group "${group}" cannot be replayed: ${reason} (was it written by hand?). ` +
        `${done} letter(s) were replayed before it, none of its page; replay the others by id, or delete it (XDEL on the group's dead-letter stream)`,
    );
  }

  /** This error with `count` more letters counted as replayed before it. */
  after(count: number): InvalidDeadLetterError {
    return count === 0 ? this : new InvalidDeadLetterError(this.group, this.id, this.reason, this.done + count);
  }
}
