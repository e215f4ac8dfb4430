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
 */
export type ChaosMode = 'crash-loop' | 'kill-restart' | 'double-sends';

export const EVENTS = {
  normal: 'chaos.normal',
  poison: 'chaos.poison',
  tick: 'chaos.tick',
  payment: 'chaos.payment',
} as const;

export const GROUPS = {
  loop: 'loop',
  workers: 'workers',
  ledger: 'ledger',
  counter: 'counter',
} as const;

export interface ChaosWorkerConfig {
  mode: ChaosMode;
  redisUrl: string;
  prefix: string;
  partitions: number;
  consumer: ConsumerOptions;
  /** double-sends: probability that a handler call SIGKILLs its process after its side effect. */
  crashRate?: number;
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
};

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
  };
}
