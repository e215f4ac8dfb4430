import { EventrailError } from '../errors/eventrail.error';

/**
 * A lag read that Redis did not answer within `timeoutMs` (Redis frozen,
 * overloaded or unreachable). No number is reported rather than a stale one:
 * a scaler acting on a value that stopped moving does more harm than a failed
 * scrape. `waitingMs` is set when an earlier read was still waiting, so this
 * one was refused at once rather than queued behind it.
 */
export class LagReadTimeoutError extends EventrailError {
  constructor(
    readonly timeoutMs: number,
    readonly waitingMs?: number,
  ) {
    super(
      waitingMs === undefined
        ? `Redis did not answer the lag read within ${timeoutMs} ms (timeoutMs): no lag is reported rather than a stale one`
        : `Redis has not answered an earlier lag read for ${Math.round(waitingMs)} ms (over timeoutMs, ${timeoutMs} ms): no new read is queued behind it`,
    );
  }
}
