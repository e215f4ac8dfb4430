interface Place {
  /** The lanes the call appends to; it leaves when it is first in each of them. */
  lanes: readonly string[];
  /** The call's check has settled: it may leave once every earlier place in its lanes has. */
  ready: boolean;
  leave: () => void;
}

/**
 * Keeps publish calls in call order while some of them wait for an
 * asynchronous schema check, where order is promised: per lane, a lane being
 * one key, or the keyless events of one partition. A call that must wait
 * takes its place in each of its lanes at once (in the synchronous part of
 * `publish`; a `publishMany` in every lane its events go to), and leaves only
 * after every earlier place in those lanes has left: a later call with a
 * synchronous schema cannot overtake one of the same key whose schema answers
 * later, while calls of other keys and partitions go straight on, even when
 * that check never answers. A check that fails gives its place up at once
 * (the call rejects, nothing is sent), so it never holds the calls behind it.
 * While nothing waits in a lane, calls to it pay nothing for this.
 *
 * Places are added to all their lanes at the same moment, so every lane lists
 * them in one global order: the earliest waiting place is first in each of
 * its lanes, and no two places can wait for each other.
 */
export class CallOrder {
  private readonly lanes = new Map<string, Place[]>();

  /** True while an earlier call waits in one of `lanes`: a call to them made now must `hold` its place behind it. */
  waitingOn(lanes: readonly string[]): boolean {
    if (this.lanes.size === 0) return false;
    for (const lane of lanes) if (this.lanes.has(lane)) return true;
    return false;
  }

  /** `waitingOn` for one call's lane (none: never waits), with no array made for it. */
  waitingOnLane(lane: string | undefined): boolean {
    return lane !== undefined && this.lanes.size > 0 && this.lanes.has(lane);
  }

  /**
   * Takes the next place in each of `lanes` now; once `check` settles and
   * every earlier place in those lanes has left, calls `send` with its value
   * (or rejects with the check's error). Settles like `send`'s promise.
   */
  hold<C, R>(lanes: readonly string[], check: C | PromiseLike<C>, send: (checked: C) => Promise<R>): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      const place: Place = { lanes: [...new Set(lanes)], ready: false, leave: () => undefined };
      for (const lane of place.lanes) {
        const queue = this.lanes.get(lane);
        if (queue) queue.push(place);
        else this.lanes.set(lane, [place]);
      }
      const settle = (leave: () => void): void => {
        place.leave = leave;
        place.ready = true;
        if (place.lanes.length === 0) leave();
        else this.release(place.lanes);
      };
      Promise.resolve(check).then(
        (checked) =>
          settle(() => {
            try {
              send(checked).then(resolve, reject);
            } catch (error) {
              reject(error);
            }
          }),
        (error: unknown) => settle(() => reject(error)),
      );
    });
  }

  /**
   * Lets ready places leave, one after another in the same tick so their
   * sends keep the order: a place leaves when it is ready and first in each
   * of its lanes, and its leaving may free the next place of any of them.
   */
  private release(start: readonly string[]): void {
    const touched = [...start];
    while (touched.length > 0) {
      const front = this.lanes.get(touched.pop()!)?.[0];
      if (!front?.ready || !front.lanes.every((lane) => this.lanes.get(lane)![0] === front)) continue;
      for (const lane of front.lanes) {
        const queue = this.lanes.get(lane)!;
        queue.shift();
        if (queue.length === 0) this.lanes.delete(lane);
        else touched.push(lane);
      }
      front.leave();
    }
  }
}

/**
 * The lane a call's order is kept in: its key, or for a keyless call its
 * partition. Undefined when the options are not usable (the call is refused
 * once checked, so its order does not matter).
 */
export function orderLane(options: unknown): string | undefined {
  if (options === null || typeof options !== 'object') return undefined;
  const { key, partition } = options as { key?: unknown; partition?: unknown };
  if (typeof key === 'string') return `key:${key}`;
  if (key !== undefined) return undefined;
  const chosen = partition ?? 0;
  // The lanes of valid partitions are made once: every keyless call asks for one.
  if (typeof chosen === 'number' && Number.isInteger(chosen) && chosen >= 0 && chosen < PARTITION_LANES.length)
    return (PARTITION_LANES[chosen] ??= `partition:${String(chosen)}`);
  return `partition:${String(chosen)}`;
}

const PARTITION_LANES = new Array<string | undefined>(1024);
