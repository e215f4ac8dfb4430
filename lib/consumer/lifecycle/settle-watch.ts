import { SettleTimeoutError, type LaggingPartition } from '../../errors/settle-timeout.error';
import { compareStreamIds } from '../../wire/stream-id';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import { withTimeout } from '../../util/timeout';

/** How often the committed offsets of partitions no worker of this process owns are read from Redis while waiting. */
export const REMOTE_CHECK_MS = 100;

/** What the wait needs from a running group (a `GroupConsumer`). */
export interface SettlingGroup {
  readonly name: string;
  localCommitted(partition: number): string | undefined;
  onCommit(listener: (partition: number, offset: string) => void): () => void;
}

/** One (group, partition) still short of its target. */
interface Pending {
  group: SettlingGroup;
  partition: number;
  target: string;
  /** The committed offset Redis gave at the last remote check (null: none yet). */
  remote: string | null;
}

/**
 * Resolves once every group in `groups` has committed, in every partition, up
 * to the entry that was last when this was called (what it had to handle or
 * dead-letter). Event-driven: each commit of a worker here is checked as it
 * lands; only partitions that no worker of this process owns (another
 * process's, or nobody's during a hand-over) are read from Redis, every
 * `REMOTE_CHECK_MS`, one GET each. The same tick also looks at the local
 * committed offsets (no round trip), for a partition taken here already at
 * its target, which no commit announces. Rejects with `SettleTimeoutError` after
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
      if (target !== null) pending.push({ group, partition, target, remote: null });
    });
  }
  if (pending.length === 0) return;
  await new Promise<void>((resolve, reject) => {
    const left = new Set(pending);
    let reading = false;
    const settle = (entry: Pending, offset: string | undefined | null): void => {
      if (offset != null && compareStreamIds(offset, entry.target) >= 0) left.delete(entry);
    };
    const checkLocal = (): void => {
      for (const entry of left) settle(entry, entry.group.localCommitted(entry.partition));
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
        const offsets = await Promise.all(remote.map((e) => client.get(keys.offset(e.group.name, e.partition))));
        remote.forEach((entry, i) => settle(entry, (entry.remote = offsets[i])));
      } catch {
        // Redis is away: the next check tries again, the deadline bounds the wait.
      } finally {
        reading = false;
      }
      checkLocal();
    };
    const unsubscribe = groups.map((group) =>
      group.onCommit((partition, offset) => {
        for (const entry of left) if (entry.group === group && entry.partition === partition) settle(entry, offset);
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

function lagging(entry: Pending): LaggingPartition {
  const local = entry.group.localCommitted(entry.partition);
  return {
    group: entry.group.name,
    partition: entry.partition,
    committed: local ?? entry.remote,
    target: entry.target,
    ownedHere: local !== undefined,
  };
}
