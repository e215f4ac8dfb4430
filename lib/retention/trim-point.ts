import { compareStreamIds, nextStreamId, STREAM_START } from '../wire/stream-id';

/**
 * Where a partition may be trimmed to: pure functions over stream ids. A MINID
 * `m` removes every entry whose id is below `m`. An offset `o` means entries up
 * to and including `o` are done, so a group with offset `o` allows a MINID of
 * at most the id just after `o`; a group with no offset allows nothing.
 */

/** MINID that keeps entries newer than `nowMs - maxAgeMs`. */
export function minIdForAge(nowMs: number, maxAgeMs: number): string {
  return `${Math.max(0, nowMs - maxAgeMs)}-0`;
}

/** The larger of the MINIDs the policies ask for: an entry goes when any policy says so. Null when none asks. */
export function requestedMinId(candidates: ReadonlyArray<string | null>): string | null {
  let result: string | null = null;
  for (const candidate of candidates) {
    if (candidate !== null && (result === null || compareStreamIds(candidate, result) > 0)) result = candidate;
  }
  return result;
}

/** The highest MINID that removes nothing a group with this committed offset still needs. */
export function allowedMinId(committed: string | null): string {
  return committed === null || committed === STREAM_START ? STREAM_START : nextStreamId(committed);
}

/**
 * Caps `requested` at what every live group allows: nothing it has not committed, nor its oldest
 * parked entry (`parkedFloor`: a parked key holds the log back like a slow group). Returns the MINID to
 * trim to (null: nothing may go) and the groups that lowered it.
 */
export function capMinId(
  requested: string | null,
  liveOffsets: ReadonlyArray<{ group: string; committed: string | null; parkedFloor?: string | null }>,
): { minId: string | null; heldBackBy: string[] } {
  if (requested === null) return { minId: null, heldBackBy: [] };
  let minId = requested;
  const heldBackBy: string[] = [];
  for (const { group, committed, parkedFloor } of liveOffsets) {
    let allowed = allowedMinId(committed);
    if (parkedFloor && compareStreamIds(parkedFloor, allowed) < 0) allowed = parkedFloor;
    if (compareStreamIds(allowed, requested) < 0) heldBackBy.push(group);
    if (compareStreamIds(allowed, minId) < 0) minId = allowed;
  }
  return { minId: minId === STREAM_START ? null : minId, heldBackBy: heldBackBy.sort() };
}

/**
 * Caps `minId` for a caller without an archive, on a partition that has been archived (`marks`: the
 * archive mark of every sink): every entry up to the highest mark is in that sink's archive (a sink
 * archives from the oldest entry left up to its mark), the entries after it are in none. Returns the
 * MINID that removes only archived entries, and whether it is lower than asked.
 */
export function capAtArchiveMarks(minId: string, marks: readonly string[]): { minId: string; capped: boolean } {
  if (marks.length === 0) return { minId, capped: false };
  const highest = marks.reduce((a, b) => (compareStreamIds(a, b) >= 0 ? a : b));
  const allowed = nextStreamId(highest);
  return compareStreamIds(allowed, minId) < 0 ? { minId: allowed, capped: true } : { minId, capped: false };
}
