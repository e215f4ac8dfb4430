import { RedisUnavailableError } from './redis-unavailable.error';

/**
 * What is known of one event of a `publishMany` that failed: `appended` (it
 * is in the log, or was a duplicate within the dedup window), `not-appended`
 * (Redis refused it, or held it back because an earlier event of its
 * partition was refused), `unknown` (sent, and no answer came back: the
 * connection dropped).
 */
export type PublishOutcome = 'appended' | 'not-appended' | 'unknown';

/**
 * `publishMany` failed after it was sent: Redis refused some of the events
 * (over `maxmemory`, a stream that takes no more entries, ...) or the
 * connection dropped before it answered. What landed in each partition is
 * a prefix of the events sent to it (wherever the append scripts run, as
 * they do unless an ACL or the provider refuses them): the events of a
 * partition after one that was not appended were not appended either, so
 * retrying the events whose outcome is not `appended`, in their order, keeps
 * per-key order (`unknown` ones with an explicit id and `dedupWindowMs`, so
 * they append once). A subclass of `RedisUnavailableError`, so code that
 * catches that one catches this too.
 */
export class PublishManyError extends RedisUnavailableError {
  constructor(
    /** One per event, in the order given to `publishMany`. */
    readonly outcomes: readonly PublishOutcome[],
    /** The result of each appended event (its id, partition and offset); undefined for the others. */
    readonly results: ReadonlyArray<{ id: string; partition: number; offset: string; duplicate?: boolean } | undefined>,
    /** The first failure: Redis's refusal, or the lost connection. */
    cause: unknown,
  ) {
    super(`publishMany of ${outcomes.length} event(s) failed: ${tally(outcomes)}`, cause);
  }
}

function tally(outcomes: readonly PublishOutcome[]): string {
  let appended = 0;
  let unknown = 0;
  for (const outcome of outcomes) {
    if (outcome === 'appended') appended++;
    else if (outcome === 'unknown') unknown++;
  }
  const refused = outcomes.length - appended - unknown;
  const parts = [`${appended} appended`, `${refused} not appended`];
  if (unknown > 0) parts.push(`${unknown} unknown (sent, no answer)`);
  return `${parts.join(', ')} (outcomes says which)`;
}
