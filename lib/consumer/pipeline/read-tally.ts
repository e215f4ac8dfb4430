import { compareStreamIds } from '../../wire/stream-id';
import type { CommitProgress } from '../coordination/lease';

/**
 * How often a commit asks the script to check the position against XINFO
 * STREAM (commitOffset-5.lua); the commits in between only add their count.
 */
export const VERIFY_EVERY_MS = 1_000;

/** A batch as read: its entries in stream order, and the ordinal of the first. */
interface Run {
  first: number;
  entries: ReadonlyArray<{ readonly offset: string }>;
}

/**
 * Numbers the entries a partition worker takes on, in read order, so each
 * commit can say how many entries it moves over (the commit script turns that
 * into the offset's lag position, commitOffset-5.lua). The reads of one worker
 * follow each other (each starts after the last entry taken on, or again from
 * an entry already read), so the entries are consecutive in the stream.
 *
 * Costs one push per batch and one binary search per commit, nothing per
 * entry. Batches are dropped once a commit passes them. About once a second
 * a commit asks for the position to be checked (`verify`).
 */
export class ReadTally {
  /** The last offset committed (or sent to commit), ordinal `baseOrdinal`. */
  private base: string;
  private baseOrdinal = 0;
  private runs: Run[] = [];
  private verifiedAt = -Infinity;

  constructor(
    committed: string,
    private readonly verifyEveryMs = VERIFY_EVERY_MS,
  ) {
    this.base = committed;
  }

  /** A batch read after `after` is taken on. A re-read (from an entry read before) replaces what followed that entry. */
  took(after: string, entries: ReadonlyArray<{ readonly offset: string }>): void {
    if (entries.length === 0) return;
    const at = this.ordinalOf(after);
    if (at === undefined) {
      // Read from somewhere this tally cannot place: the next commit cannot count.
      this.runs = [];
      return;
    }
    // Runs are in read order (ascending `first`): the ones a re-read replaces are at the end.
    while (this.runs.length > 0 && this.runs[this.runs.length - 1].first > at) this.runs.pop();
    const last = this.runs[this.runs.length - 1];
    if (last && last.first + last.entries.length - 1 > at) {
      this.runs[this.runs.length - 1] = { first: last.first, entries: last.entries.slice(0, at - last.first + 1) };
    }
    this.runs.push({ first: at + 1, entries });
  }

  /**
   * A commit of `offset` is being sent: what it moves over since the last
   * one, or undefined when that is not known. `offset` becomes the base of
   * the next commit.
   */
  advance(offset: string): CommitProgress | undefined {
    if (compareStreamIds(offset, this.base) <= 0) return undefined;
    const at = this.ordinalOf(offset);
    const from = this.entryAt(this.baseOrdinal + 1);
    let progress: CommitProgress | undefined;
    if (at !== undefined && from !== undefined) {
      const now = performance.now();
      const verify = now - this.verifiedAt >= this.verifyEveryMs;
      if (verify) this.verifiedAt = now;
      progress = { since: this.base, from, count: at - this.baseOrdinal, verify };
    }
    this.base = offset;
    if (at === undefined) {
      this.baseOrdinal = 0;
      this.runs = [];
    } else {
      this.baseOrdinal = at;
      // The runs this commit passed are at the front.
      while (this.runs.length > 0 && this.runs[0].first + this.runs[0].entries.length - 1 <= at) this.runs.shift();
    }
    return progress;
  }

  private ordinalOf(id: string): number | undefined {
    if (id === this.base) return this.baseOrdinal;
    for (let r = this.runs.length - 1; r >= 0; r--) {
      const { first, entries } = this.runs[r];
      if (compareStreamIds(id, entries[0].offset) < 0) continue;
      let low = 0;
      let high = entries.length - 1;
      while (low <= high) {
        const mid = (low + high) >> 1;
        const order = compareStreamIds(entries[mid].offset, id);
        if (order === 0) return first + mid;
        if (order < 0) low = mid + 1;
        else high = mid - 1;
      }
      return undefined;
    }
    return undefined;
  }

  private entryAt(ordinal: number): string | undefined {
    for (const { first, entries } of this.runs) {
      if (ordinal >= first && ordinal < first + entries.length) return entries[ordinal - first].offset;
    }
    return undefined;
  }
}
