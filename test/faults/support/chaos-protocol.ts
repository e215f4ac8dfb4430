import type { ConsumerOptions, GroupStats } from '../../../lib';

/**
 * What the chaos suites and their worker process (chaos-worker.ts) agree on:
 * modes, event names, the keys where handlers leave their records, and the
 * IPC messages. Every record key lives under the test's own prefix, so
 * `deletePrefix` removes them with the log.
 */

/**
 * - `crash-loop`: group `loop`; `chaos.poison` kills the process, `chaos.normal` is recorded.
 * - `kill-restart`: group `workers`; every `chaos.tick` handling is recorded in order.
 * - `double-sends`: groups `ledger` and `counter` keep running totals with their own
 *   idempotency record, and a handler call crashes the process at `crashRate`.
 * - `fuzz`: groups `fuzz-idem` (idempotency on; `fuzz.both` and `fuzz.first`) and, with
 *   `fuzzGroups: 2`, `fuzz-plain` (`fuzz.both` only); `fuzz.none` has no handler. Every
 *   attempt is recorded, and fails as its event's data says (see `FuzzData`).
 */
export type ChaosMode = 'crash-loop' | 'kill-restart' | 'double-sends' | 'fuzz';

export const EVENTS = {
  normal: 'chaos.normal',
  poison: 'chaos.poison',
  tick: 'chaos.tick',
  payment: 'chaos.payment',
  fuzzBoth: 'fuzz.both',
  fuzzFirst: 'fuzz.first',
  fuzzNone: 'fuzz.none',
} as const;

export const GROUPS = {
  loop: 'loop',
  workers: 'workers',
  ledger: 'ledger',
  counter: 'counter',
  fuzzIdem: 'fuzz-idem',
  fuzzPlain: 'fuzz-plain',
} as const;

export interface ChaosWorkerConfig {
  mode: ChaosMode;
  redisUrl: string;
  prefix: string;
  partitions: number;
  consumer: ConsumerOptions;
  /** double-sends: probability that a handler call SIGKILLs its process after its side effect. */
  crashRate?: number;
  /** fuzz: how many groups the workers run (1: `fuzz-idem`; 2: and `fuzz-plain`). */
  fuzzGroups?: number;
  /** fuzz: an older version of the service, whose `fuzz-idem` has no handler for `fuzz.first` (a rolling deploy). */
  older?: boolean;
}

/** Keys the handlers write, under the test's prefix. */
export const chaosKeys = {
  /** crash-loop: list of `seq|pid`, one per handling of a normal event. */
  handledSeqs: (prefix: string): string => `${prefix}:chaos:handled-seqs`,
  /** crash-loop: how often the poison handler was entered (each entry kills the process). */
  poisonRuns: (prefix: string): string => `${prefix}:chaos:poison-runs`,
  /** kill-restart: list of `partition|offset|key|seq|pid`, one per handling, in the order Redis applied them. */
  handlings: (prefix: string): string => `${prefix}:chaos:handlings`,
  /** double-sends: the group's idempotency record of one event id. */
  seen: (prefix: string, group: string, eventId: string): string => `${prefix}:chaos:${group}:seen:${eventId}`,
  /** double-sends: the group's running total. */
  total: (prefix: string, group: string): string => `${prefix}:chaos:${group}:total`,
  /** double-sends: handler calls of the group. */
  calls: (prefix: string, group: string): string => `${prefix}:chaos:${group}:calls`,
  /** double-sends: handler calls that found the event already applied (their own idempotency record). */
  hits: (prefix: string, group: string): string => `${prefix}:chaos:${group}:hits`,
  /**
   * double-sends: set of pids whose handler decided to crash, added atomically with the side effect.
   * A set, because the two groups' handlers of one process may both decide so at once.
   */
  crashedPids: (prefix: string): string => `${prefix}:chaos:crashed-pids`,
  /** fuzz: list of every handler attempt (`encodeAttempt`), in the order Redis applied them. */
  fuzzAttempts: (prefix: string): string => `${prefix}:chaos:fuzz-attempts`,
  /** fuzz: set of `group|eventId` whose poison was cured (before a replay): their handlers succeed from then on. */
  fuzzCured: (prefix: string): string => `${prefix}:chaos:fuzz-cured`,
};

/**
 * Payload of the fuzz events. `fail`: the first `fail` attempts throw (in every
 * group), a transient failure that a retry gets past. `poison`: per group,
 * every attempt throws an `Error` (`always`, dead-lettered once the retries
 * run out) or a `NonRetryableError` (`non-retryable`, dead-lettered at once),
 * until the poison is cured for that group.
 */
export interface FuzzData {
  n: number;
  seq: number;
  fail?: number;
  poison?: Record<string, PoisonKind>;
}

/**
 * `idempotencyTtlMs` of the fuzz-idem group: a done-mark's score is its
 * commit time on the Redis clock plus this, so the checker can tell when it was committed.
 */
export const FUZZ_MARK_TTL_MS = 3_600_000;

export type PoisonKind = 'always' | 'non-retryable';

/** One handler attempt in fuzz mode, as the handler records it. */
export interface FuzzAttempt {
  group: string;
  partition: number;
  offset: string;
  eventId: string;
  key: string;
  attempt: number;
  pid: number;
  /** Date.now() when the handler was called. */
  startedAt: number;
  /**
   * Date.now() of the worker process's last lease check that found its lease still valid, before the
   * handler was called (on the common path, the check that let this handler start; 0 before any).
   */
  checkedAt: number;
  /** H: the attempt succeeded (the event was handled); T: it threw a transient failure (`fail`); P: it threw as poison. */
  outcome: 'H' | 'T' | 'P';
  /**
   * Score of the group's idempotency done-mark of the event id when the
   * attempt was recorded (expiry in ms on the Redis clock), or null when there was none.
   */
  mark: number | null;
}

/** The record without its outcome and mark, which the recording script appends. */
export function encodeAttemptHead(a: Omit<FuzzAttempt, 'outcome' | 'mark'>): string {
  return [a.group, a.partition, a.offset, a.eventId, a.key, a.attempt, a.pid, a.startedAt, a.checkedAt].join('|');
}

export function decodeAttempt(value: string): FuzzAttempt {
  const [group, partition, offset, eventId, key, attempt, pid, startedAt, checkedAt, outcome, mark] = value.split('|');
  return {
    group,
    partition: Number(partition),
    offset,
    eventId,
    key,
    attempt: Number(attempt),
    pid: Number(pid),
    startedAt: Number(startedAt),
    checkedAt: Number(checkedAt),
    outcome: outcome as FuzzAttempt['outcome'],
    mark: mark ? Number(mark) : null,
  };
}

/** One handling in kill-restart, as the handler records it. */
export interface Handling {
  partition: number;
  offset: string;
  key: string;
  seq: number;
  pid: number;
}

export function encodeHandling(h: Handling): string {
  return `${h.partition}|${h.offset}|${h.key}|${h.seq}|${h.pid}`;
}

export function decodeHandling(value: string): Handling {
  const [partition, offset, key, seq, pid] = value.split('|');
  return { partition: Number(partition), offset, key, seq: Number(seq), pid: Number(pid) };
}

export type ChaosWorkerMessage =
  { type: 'ready'; pid: number; workerId: string } | { type: 'stats'; pid: number; stats: Record<string, GroupStats> };

export type ChaosWorkerCommand = { cmd: 'stats' };

/** Environment of a chaos worker process. */
export function chaosWorkerEnv(config: ChaosWorkerConfig): Record<string, string> {
  return {
    NO_COLOR: '1',
    EVENTRAIL_REDIS_URL: config.redisUrl,
    EVENTRAIL_PREFIX: config.prefix,
    CHAOS_MODE: config.mode,
    CHAOS_PARTITIONS: String(config.partitions),
    CHAOS_CONSUMER: JSON.stringify(config.consumer),
    CHAOS_CRASH_RATE: String(config.crashRate ?? 0),
    CHAOS_FUZZ_GROUPS: String(config.fuzzGroups ?? 1),
    CHAOS_FUZZ_OLDER: config.older ? '1' : '',
  };
}
