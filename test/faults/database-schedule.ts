import { Prng } from './prng';

/** The one event type and group of the database schedules: every handling goes through the inbox. */
export const DB_EVENT = 'db.effect';
export const DB_GROUP = 'db-inbox';
/** `application_name` of the workers' connections, so a fault finds them in `pg_stat_activity`. */
export const WORKER_APP = 'eventrail-fuzz-worker';

/** Where the workers' handlers count what the database did to them, under the test's prefix. */
export const databaseKeys = {
  /** Handles that rejected (a lost connection, a restart): the library retried them. */
  failed: (prefix: string): string => `${prefix}:dbfuzz:failed-handles`,
  /** Handles that found the inbox row: a redelivery skipped. */
  duplicates: (prefix: string): string => `${prefix}:dbfuzz:duplicates`,
};

/**
 * A database fault schedule, drawn from a seed: workers whose handler writes
 * its effect through the inbox (and whose relay drains the outbox), a
 * publisher that appends some events directly and writes others as outbox
 * rows, and faults on PostgreSQL between the publishes. The same seed always
 * gives the same schedule.
 */
export interface DatabaseSchedule {
  seed: number;
  partitions: number;
  workers: number;
  consumer: {
    concurrency: number;
    batchSize: number;
    lockTtlMs: number;
    heartbeatTtlMs: number;
    /** Retry by time, as the guide has a handler that depends on a database: an outage is waited out, never dead-lettered. */
    maxRetryAgeMs: number;
    retryBackoffMs: number;
    retryBackoffMaxMs: number;
    /**
     * The default ordering ('key') parks a message whose quick retries a restart outlasted. Its
     * tiers here are quick, so that a schedule drains in seconds; its budget is `maxRetryAgeMs`'s 60 s.
     */
    redelivery: { delayMs: number; factor: number; maxDelayMs: number; maxAgeMs: number };
  };
  events: DatabaseEventSpec[];
  steps: DatabaseStep[];
}

export interface DatabaseEventSpec {
  /** Index in `events`, carried in the data as `n`. */
  n: number;
  key: string;
  /** `publish`: `publishMany` on the log; `outbox`: a row in a database transaction, which the relay appends. */
  via: 'publish' | 'outbox';
}

export type DatabaseFaultKind = 'terminate-handler' | 'terminate-all' | 'restart-postgres' | 'kill-worker';

export type DatabaseStep =
  /** The events of one call: one `publishMany`, or one transaction of outbox rows. */
  | { kind: 'publish'; events: number[]; via: 'publish' | 'outbox' }
  | { kind: 'pause'; ms: number }
  /** `pg_terminate_backend` on the first worker connection seen inside an inbox transaction (waits up to a second for one). */
  | { kind: 'terminate-handler' }
  /** `pg_terminate_backend` on every worker connection: handlers, idle pooled ones, the relay's session. */
  | { kind: 'terminate-all' }
  /** `pg_ctl restart -m fast` (sessions ended) or `-m immediate` (a crash, then crash recovery). */
  | { kind: 'restart-postgres'; mode: 'fast' | 'immediate' }
  /** SIGKILL the worker in `slot`; the supervisor starts a new one there. */
  | { kind: 'kill-worker'; slot: number };

export const DATABASE_FAULT_KINDS: readonly DatabaseFaultKind[] = ['terminate-handler', 'terminate-all', 'restart-postgres', 'kill-worker'];

/** Bounds of one schedule: a few seconds of publishing, so a schedule takes about ten seconds with its drain. */
const LIMITS = {
  events: [60, 160],
  faults: [2, 5],
  restarts: 2,
  keys: [1, 10],
  lockTtlMs: 1000,
} as const;

export function drawDatabaseSchedule(seed: number): DatabaseSchedule {
  const rng = new Prng(seed);
  const partitions = rng.int(1, 4);
  const workers = rng.int(1, 2);
  const consumer = {
    concurrency: rng.pick([1, 2, 4]),
    batchSize: rng.pick([1, 5, 20]),
    lockTtlMs: LIMITS.lockTtlMs,
    heartbeatTtlMs: LIMITS.lockTtlMs,
    maxRetryAgeMs: 60_000,
    retryBackoffMs: 20,
    retryBackoffMaxMs: 200,
    redelivery: { delayMs: 100, factor: 2, maxDelayMs: 1_000, maxAgeMs: 60_000 },
  };
  const keys = rng.int(LIMITS.keys[0], LIMITS.keys[1]);
  const events: DatabaseEventSpec[] = [];
  for (let n = rng.int(LIMITS.events[0], LIMITS.events[1]); events.length < n;) {
    events.push({ n: events.length, key: `k${rng.int(0, keys - 1)}`, via: rng.chance(0.5) ? 'outbox' : 'publish' });
  }
  return { seed, partitions, workers, consumer, events, steps: drawSteps(rng, events, workers) };
}

function drawSteps(rng: Prng, events: readonly DatabaseEventSpec[], workers: number): DatabaseStep[] {
  // Consecutive events of one way make one call of 1 to 10 events.
  const publishes: DatabaseStep[] = [];
  for (let n = 0; n < events.length;) {
    const via = events[n].via;
    const batch: number[] = [];
    const size = rng.int(1, 10);
    while (n < events.length && events[n].via === via && batch.length < size) batch.push(n++);
    publishes.push({ kind: 'publish', events: batch, via });
  }
  const faults: DatabaseStep[] = [];
  let restarts = 0;
  for (let i = rng.int(LIMITS.faults[0], LIMITS.faults[1]); i > 0; i--) {
    let kind = rng.pick(DATABASE_FAULT_KINDS);
    if (kind === 'restart-postgres' && restarts++ >= LIMITS.restarts) kind = 'terminate-handler';
    faults.push(drawFault(rng, kind, workers));
  }
  const steps: DatabaseStep[] = [];
  const at = faults.map(() => rng.int(1, publishes.length + 1));
  publishes.forEach((publish, i) => {
    steps.push(publish, { kind: 'pause', ms: rng.int(0, 40) });
    faults.forEach((fault, f) => at[f] === i + 1 && steps.push(fault));
  });
  // Faults drawn past the last publish hit the groups while they catch up.
  faults.forEach((fault, f) => at[f] > publishes.length && steps.push({ kind: 'pause', ms: rng.int(50, 300) }, fault));
  return steps;
}

function drawFault(rng: Prng, kind: DatabaseFaultKind, workers: number): DatabaseStep {
  switch (kind) {
    case 'restart-postgres':
      return { kind, mode: rng.pick(['fast', 'immediate'] as const) };
    case 'kill-worker':
      return { kind, slot: rng.int(0, workers - 1) };
    default:
      return { kind };
  }
}

/** The schedule in a few lines: the setup, then each fault with the publishes before it. */
export function describeDatabaseSchedule(s: DatabaseSchedule): string {
  const outbox = s.events.filter((e) => e.via === 'outbox').length;
  const lines = [
    `seed ${s.seed}: ${s.partitions} partitions, ${s.workers} workers, consumer ${JSON.stringify(s.consumer)}; ` +
      `${s.events.length} events (${outbox} through the outbox)`,
  ];
  let published = 0;
  s.steps.forEach((step, i) => {
    if (step.kind === 'publish') published += step.events.length;
    else if (step.kind !== 'pause') lines.push(`  step ${i}, after ${published} events: ${JSON.stringify(step)}`);
  });
  return lines.join('\n');
}
