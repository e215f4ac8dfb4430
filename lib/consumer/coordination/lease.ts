import type { InitialOffset } from '../consumer.options';
import { offsetBeforeTime, previousStreamId } from '../../wire/stream-id';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import type { MetricsHooks } from '../../metrics/eventrail-metrics';
import { LogLossWatch } from './log-loss-watch';

/**
 * The lease of a (group, partition): at most one worker of a group works a
 * partition at a time. Its value is the token `<workerId>:<epoch>`, the epoch
 * fresh from a counter on every acquire (acquireLease-5.lua builds it), so a
 * worker that paused past its TTL and came back holds a token that no longer
 * matches: every commit checks it (commitOffset-5.lua) and fails.
 */

/**
 * The worker id in a lease token (worker ids contain `:` themselves; the epoch is what follows the last
 * one). A lease an operator revoked (`revoked:<token>`, see revoke-lease.lua) is still its holder's
 * until the holder's running handlers end: it names the holder.
 */
export function leaseOwner(token: string): string {
  const held = token.startsWith(REVOKED) ? token.slice(REVOKED.length) : token;
  return held.slice(0, held.lastIndexOf(':'));
}

const REVOKED = 'revoked:';

/** The epoch in a lease token. */
export function leaseEpoch(token: string): string {
  return token.slice(token.lastIndexOf(':') + 1);
}

/**
 * Whether `token` was issued right after `previous` to the same worker: the
 * lease this worker takes is the one it held itself until it lapsed (its
 * event loop, or Redis, stalled past the TTL), with no other holder between.
 * The epoch counter moves only when a lease is taken (acquireLease-5.lua), so
 * the epoch before this one was the last holder's.
 */
export function followsOwnLease(previous: string | undefined, token: string): boolean {
  if (previous === undefined || leaseOwner(previous) !== leaseOwner(token)) return false;
  return Number(leaseEpoch(previous)) + 1 === Number(leaseEpoch(token));
}

/** What acquiring gives a worker: its lease, where the group's offset stands, and whether the last holder left cleanly. */
export interface AcquiredLease {
  lease: PartitionLease;
  /** Committed offset when the lease was taken (initialised from `initialOffset` the first time). */
  committed: string;
  /** The previous holder did not release the lease: it died, froze or lost Redis. */
  recovering: boolean;
}

/**
 * What a commit moved over, as the worker read it: from `since` (its previous
 * commit, or the offset it found) the entries `from` up to the new offset,
 * `count` of them. The commit script keeps the new offset's lag position with
 * it (commitOffset-5.lua); without it the position is forgotten and lag is
 * counted until a commit reaches the end of the log.
 */
export interface CommitProgress {
  since: string;
  from: string;
  count: number;
  /** Check the position against XINFO STREAM in this commit (it costs more than the count alone). */
  verify: boolean;
}

/** How a commit ended: `committed`, or `fenced` when the lease is no longer this worker's. */
export type CommitVerdict = 'committed' | 'fenced';

/** A lease this worker holds on one partition of a group. */
export class PartitionLease {
  /**
   * Until when (`performance.now()`) the lease surely holds: the send time of
   * the last call that set its TTL, plus the TTL. Redis started the TTL later
   * than that, so this errs early.
   */
  private validUntil: number;

  private constructor(
    private readonly redis: EventrailRedis,
    readonly group: string,
    readonly partition: number,
    /** `<workerId>:<epoch>`, which fences every commit. */
    readonly token: string,
    private readonly ttlMs: number,
    sentAt: number,
  ) {
    this.validUntil = sentAt + ttlMs;
  }

  /**
   * True once the lease may have expired without this worker hearing of it
   * (the process was paused, or Redis did not answer, for longer than the
   * TTL): another worker may own the partition now, so no handler call may
   * start until a renewal or a commit says the lease still holds. One clock
   * read, no round trip: the batch loop asks it before every entry.
   */
  get mayHaveExpired(): boolean {
    return performance.now() >= this.validUntil;
  }

  /**
   * Tries the leases of `partitions` in one round trip (one script call per
   * partition, sent together: on a cluster they live in different slots).
   * Null where another worker holds the lease or Redis did not answer.
   * `generation` is the group's as the worker's last heartbeat saw it: the
   * partition is stamped with it, and what a deleted generation left there is
   * cleared (see dropGroupPartition-4.lua).
   */
  static async acquire(
    redis: EventrailRedis,
    group: string,
    partitions: readonly number[],
    workerId: string,
    ttlMs: number,
    initialOffset: InitialOffset,
    generation = '0',
    metrics?: MetricsHooks,
  ): Promise<Array<AcquiredLease | null>> {
    const { keys, client, scripts } = redis;
    const [initialMode, initialId] = initialOffsetArgs(initialOffset);
    // An offset this process knew that is missing now went with the log: start at the start of the new one (see LogLossWatch).
    const watch = LogLossWatch.of(workerId, keys.prefix);
    const atStart = await watch.mustStartAtStart(redis, group, partitions, generation, metrics);
    const sentAt = performance.now();
    const replies = await Promise.all(
      partitions.map((partition) => {
        const [mode, id] = atStart.has(partition) ? (['start', ''] as const) : [initialMode, initialId];
        return scripts.acquireLease({ group, partition, workerId, ttlMs, initialMode: mode, initialId: id, generation }).catch(() => null);
      }),
    );
    watch.taken(
      group,
      generation,
      partitions.filter((_, i) => replies[i] !== null),
    );
    await watch.remember(redis).catch(() => undefined);
    // A partition that a deleted generation of the group left behind: its
    // done-marks go before the worker reads (an extra command only then). If
    // that fails (Redis is away) the partition is not started now; its lease
    // expires, or this worker takes it again.
    const cleared = await Promise.all(
      replies.map((reply, i) =>
        reply?.previousHolder === 'droppedGeneration'
          ? client.del(keys.done(group, partitions[i])).then(
              () => true,
              () => false,
            )
          : Promise.resolve(true),
      ),
    );
    return replies.map((reply, i) => {
      if (!reply || !cleared[i]) return null;
      const { token, committed, previousHolder } = reply;
      const lease = new PartitionLease(redis, group, partitions[i], token, ttlMs, sentAt);
      return { lease, committed, recovering: previousHolder === 'unreleased' };
    });
  }

  /** Extends the lease: `held`, `lost` (expired or taken over), or `unknown` when Redis did not answer (try again later). */
  renew(): Promise<'held' | 'lost' | 'unknown'> {
    const sentAt = performance.now();
    const { group, partition, token, ttlMs } = this;
    return this.redis.scripts.renewLease({ group, partition, token, ttlMs }).then(
      (renewed) => {
        if (!renewed) return 'lost';
        this.extendedAt(sentAt);
        return 'held';
      },
      () => 'unknown' as const,
    );
  }

  /**
   * Moves the committed offset to `offset` if the lease is still this
   * worker's, extends it, and writes the idempotency done-marks of `doneIds`
   * (with `markTtlMs` > 0) and the offset's lag position (from `progress`) in
   * the same atomic step: still one script call. Rejects when Redis did not
   * answer: whether it landed is then unknown.
   */
  async commit(
    offset: string,
    doneIds: readonly string[],
    markTtlMs: number,
    progress?: CommitProgress,
    /** Parked lines changed since the last commit, stored in the same step (`'key'` and `'unordered'` ordering). */
    parked?: ReadonlyArray<readonly [string, string]>,
  ): Promise<CommitVerdict> {
    const { group, partition, token, ttlMs } = this;
    const sentAt = performance.now();
    const committed = await this.redis.scripts.commitOffset({
      group,
      partition,
      token,
      ttlMs,
      offset,
      markTtlMs,
      doneIds,
      progress,
      parked,
    });
    if (!committed) return 'fenced';
    this.extendedAt(sentAt); // the commit script extends the lease too
    return 'committed';
  }

  /** A call sent at `sentAt` found the lease held and set its TTL again. */
  private extendedAt(sentAt: number): void {
    this.validUntil = Math.max(this.validUntil, sentAt + this.ttlMs);
  }

  /**
   * Recovery path: records one more delivery of the entry after the committed
   * offset (`offset`) by a worker of this partition, and returns how many
   * there were. Kept with the lease's recovery state, which a clean release
   * resets (markDelivery-1.lua).
   */
  countDelivery(offset: string): Promise<number> {
    return this.redis.scripts.markDelivery({ group: this.group, partition: this.partition, offset });
  }

  /**
   * Gives the lease back so another worker can take the partition at once,
   * and records the epoch as ended cleanly (the next owner counts no crash).
   * Clears the lease if an operator revoked it from this worker (see
   * revoke-lease.lua): call it then only once no handler it started runs.
   * Does nothing when the lease is no longer this worker's.
   */
  async release(): Promise<'released' | 'cleared' | 'not-held'> {
    const { group, partition, token } = this;
    return this.redis.scripts.releaseLease({ group, partition, token, epoch: leaseEpoch(token) });
  }
}

function initialOffsetArgs(offset: InitialOffset): ['start' | 'end' | 'id', string] {
  switch (offset.mode) {
    case 'fromStart':
      return ['start', ''];
    case 'fromEnd':
      return ['end', ''];
    case 'fromId':
      return ['id', previousStreamId(offset.id)];
    case 'fromTime':
      return ['id', offsetBeforeTime(offset.time)];
  }
}
