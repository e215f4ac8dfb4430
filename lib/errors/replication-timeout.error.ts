import { EventrailError } from './eventrail.error';

/**
 * `durability: 'replicated'`: the primary appended the event(s), but fewer
 * than the required replicas confirmed within the timeout. The append is not
 * undone: the event may be delivered, or lost if the primary fails before its
 * replicas catch up. Publishing it again is safe with an explicit id and
 * `dedupWindowMs`.
 */
export class ReplicationTimeoutError extends EventrailError {
  constructor(
    readonly confirmed: number,
    readonly required: number,
    readonly timeoutMs: number,
    /** What was appended on the primary (ids and offsets). */
    readonly appended: ReadonlyArray<{ id: string; partition: number; offset: string }>,
  ) {
    super(
      `Only ${confirmed} of ${required} replica(s) confirmed within ${timeoutMs} ms; ` +
        `${appended.length} event(s) were appended on the primary but are not known to be replicated`,
    );
  }
}
