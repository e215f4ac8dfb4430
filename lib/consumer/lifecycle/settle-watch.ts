import { SettleTimeoutError, type LaggingPartition } from '../../errors/settle-timeout.error';
import { compareStreamIds } from '../../wire/stream-id';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import type { ParkedLines } from '../handling/parked-lines';
import { withTimeout } from '../../util/timeout';

/** How often the committed offsets of partitions no worker of this process owns are read from Redis while waiting. */
export const REMOTE_CHECK_MS = 100;

/** What the wait needs from a running group (a `GroupConsumer`). */
export interface SettlingGroup {
  readonly name: string;
  localCommitted(partition: number): string | undefined;
  /** The parked lines this process's worker of `partition` holds (`'key'` and `'unordered'` ordering); undefined where it parks nothing. */
  localParked?(partition: number): Pick<ParkedLines, 'size' | 'hasChanges' | 'parkedCount'> | undefined;
  onCommit(listener: (partition: number, offset: string) => void): () => void;
}

/** One (group, partition) still short of its target. */
interface Pending {
  group: SettlingGroup;
  partition: number;
  target: string;
  /** The committed offset Redis gave at the last remote check (null: none yet). */
  remote: string | null;
  /** Redis held parked lines of the partition at the last remote check (true until one says otherwise). */
  remoteParked: boolean;
}

/**
 * Resolves once every group in `groups` has committed, in every partition, up
 * to the entry that was last when this was called (what it had to handle or
 * dead-letter), and holds no parked message there any more (a parked message
 * is behind the committed offset but not done; a line that emptied counts
 * once the commit that removes it has landed). Event-driven: each commit of a worker here is checked as it
 * lands; only partitions that no worker of this process owns (another
 * process's, or nobody's during a hand-over) are read from Redis, every
 * `REMOTE_CHECK_MS`, one GET each. The same tick also looks at the local
 * committed offsets (no round trip), for a partition taken here already at
 * its target, which no commit announces. A remote partition's parked lines
 * are read with its offset (HGET of its `parkedFloor`, present while any
 * line is). Rejects with `SettleTimeoutError` after
 * `timeoutMs`, naming what is still behind.
 */
export async function waitUntilSettled(
  redis: EventrailRedis,
  groups: readonly SettlingGroup[],
  running: Promise<void>,
  timeoutMs: number,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  if (
    !(await withTimeout(
      running.then(() => true),
      timeoutMs,
      () => false,
    ))
  )
    throw new SettleTimeoutError(timeoutMs, [], true);
  const targets = await lastEntryIds(redis);
  const pending: Pending[] = [];
  for (const group of groups) {
    targets.forEach((target, partition) => {
      if (target !== null) pending.push({ group, partition, target, remote: null, remoteParked: true });
    });
  }
  if (pending.length === 0) return;
  await new Promise<void>((resolve, reject) => {
    const left = new Set(pending);
    let reading = false;
    const reached = (entry: Pending, offset: string | undefined | null): boolean =>
      offset != null && compareStreamIds(offset, entry.target) >= 0;
    const settleLocal = (entry: Pending): void => {
      if (reached(entry, entry.group.localCommitted(entry.partition)) && !parkedHere(entry)) left.delete(entry);
    };
    const checkLocal = (): void => {
      for (const entry of left) settleLocal(entry);
      if (left.size === 0) done();
    };
    const checkRemote = async (): Promise<void> => {
      if (reading) return;
      const remote = [...left].filter((entry) => entry.group.localCommitted(entry.partition) === undefined);
      // A partition taken here since the last check may already be at its target (taken at the end of
      // the log, or where another process had committed it to): no commit of it would tell.
      if (remote.length < left.size) checkLocal();
      if (remote.length === 0 || left.size === 0) return;
      reading = true;
      try {
        const { client, keys } = redis;
        const read = await Promise.all(
          remote.map((e) =>
            Promise.all([
              client.get(keys.offset(e.group.name, e.partition)),
              client.hget(keys.recovery(e.group.name, e.partition), 'parkedFloor'),
            ]),
          ),
        );
        remote.forEach((entry, i) => {
          [entry.remote] = read[i];
          entry.remoteParked = read[i][1] !== null;
          if (reached(entry, entry.remote) && !entry.remoteParked) left.delete(entry);
        });
      } catch {
        // Redis is away: the next check tries again, the deadline bounds the wait.
      } finally {
        reading = false;
      }
      checkLocal();
    };
    const unsubscribe = groups.map((group) =>
      group.onCommit((partition) => {
        for (const entry of left) if (entry.group === group && entry.partition === partition) settleLocal(entry);
        if (left.size === 0) done();
      }),
    );
    const interval = setInterval(() => void checkRemote(), REMOTE_CHECK_MS);
    const timer = setTimeout(
      () => done(new SettleTimeoutError(timeoutMs, [...left].map(lagging))),
      Math.max(0, deadline - performance.now()),
    );
    function done(error?: SettleTimeoutError): void {
      clearInterval(interval);
      clearTimeout(timer);
      unsubscribe.forEach((off) => off());
      if (error) reject(error);
      else resolve();
    }
    checkLocal();
    void checkRemote();
  });
}

/** The id of each partition's last entry, null where the stream is empty: one round trip for all partitions. */
async function lastEntryIds(redis: EventrailRedis): Promise<Array<string | null>> {
  const { client, keys } = redis;
  const replies = await Promise.all(
    Array.from({ length: keys.partitions }, (_, p) => client.xrevrange(keys.stream(p), '+', '-', 'COUNT', 1)),
  );
  return replies.map((reply) => reply[0]?.[0] ?? null);
}

/** True while the worker here holds parked lines of the partition, or has emptied one without committing that yet. */
function parkedHere(entry: Pending): boolean {
  const lines = entry.group.localParked?.(entry.partition);
  return lines !== undefined && (lines.size > 0 || lines.hasChanges);
}

function lagging(entry: Pending): LaggingPartition {
  const local = entry.group.localCommitted(entry.partition);
  const ownedHere = local !== undefined;
  const lines = ownedHere ? entry.group.localParked?.(entry.partition) : undefined;
  return {
    group: entry.group.name,
    partition: entry.partition,
    committed: local ?? entry.remote,
    target: entry.target,
    ownedHere,
    parked: ownedHere ? parkedHere(entry) : entry.remoteParked,
    parkedCount: lines ? lines.parkedCount : ownedHere ? 0 : null,
  };
}
