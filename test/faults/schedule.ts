import { EVENTS, FuzzData, GROUPS, PoisonKind } from './support/chaos-protocol';
import { Prng } from './prng';
import type { Ordering } from '../../lib';

/**
 * A fault schedule, drawn from a seed: the setup (partitions, workers,
 * groups, consumer options), the events with the failures they carry, and
 * the steps the runner takes one after another. The same seed always gives
 * the same schedule; what the processes then do in between is up to timing.
 */
export interface Schedule {
  seed: number;
  partitions: number;
  workers: number;
  /** fuzz-idem (idempotency on), and with 2 also fuzz-plain. */
  groups: string[];
  consumer: {
    concurrency: number;
    batchSize: number;
    lockTtlMs: number;
    heartbeatTtlMs: number;
    maxRetries: number;
    retryBackoffMs: number;
    retryBackoffMaxMs: number;
    maxDeliveries: number;
    /** What a failing message holds back once its retries in place are spent (parked keys: 'key', 'unordered'). */
    ordering: Ordering;
    /** The parked stage's tiers ('key', 'unordered'): quick, and a budget that outlasts a schedule's faults. */
    redelivery?: { delayMs: number; factor: number; maxDelayMs: number; maxAgeMs: number };
  };
  events: EventSpec[];
  steps: Step[];
}

export interface EventSpec {
  /** Index in `events`, carried in the data as `n`. */
  n: number;
  event: string;
  /** The ordering key; keyless events go to partition 0 or to `partition`. */
  key?: string;
  partition?: number;
  data: FuzzData;
}

export type FaultKind =
  'kill-worker' | 'freeze-worker' | 'crash-redis' | 'reset-offsets' | 'replay-dead-letters' | 'rolling-deploy' | ExhaustionFault;

/** A Redis that refuses writes or stops answering, or a worker's path that drops everything: nothing crashes. */
export type ExhaustionFault = 'fill-redis' | 'stall-redis' | 'cut-worker';

export type Step =
  /** One `publish` call (one event) or one `publishMany` call (several). */
  | { kind: 'publish'; events: number[]; many: boolean }
  | { kind: 'pause'; ms: number }
  /** SIGKILL the worker in `slot`; the supervisor starts a new one there. */
  | { kind: 'kill-worker'; slot: number }
  /** SIGSTOP the worker in `slot` for `ms` (longer than the lease TTL), then SIGCONT; the schedule goes on meanwhile. */
  | { kind: 'freeze-worker'; slot: number; ms: number }
  /** SIGKILL Redis, keep it down `downMs`, start it again on its AOF. */
  | { kind: 'crash-redis'; downMs: number }
  /** `resetOffsets(group, 'start', { force: true })` while the workers run: everything is handled again. */
  | { kind: 'reset-offsets'; group: string }
  /** Cure the poison of every dead letter `group` has now, and replay them all. */
  | { kind: 'replay-dead-letters'; group: string }
  /**
   * A rolling deploy seen from the old side: a worker of an older version (its `fuzz-idem` has no
   * `fuzz.first` handler) joins next to the others, stays `ms`, then leaves by `leave` (SIGTERM: a clean
   * stop; SIGKILL: its membership expires); the schedule goes on meanwhile.
   */
  | { kind: 'rolling-deploy'; ms: number; leave: 'SIGTERM' | 'SIGKILL' }
  /**
   * Redis full: `maxmemory` set below its used memory (policy `noeviction`), so it refuses every write
   * with `OOM`, for `ms`; then no limit again. The schedule goes on meanwhile (its publishes are refused).
   */
  | { kind: 'fill-redis'; ms: number }
  /** Redis stalled: SIGSTOP its process for `ms` (below or past the lease TTL), then SIGCONT; the schedule goes on meanwhile. */
  | { kind: 'stall-redis'; ms: number }
  /**
   * The path between the worker in `slot` and Redis goes silent for `ms`: its proxy stops forwarding
   * without closing anything (no FIN, no RST), then forwards what it held. The schedule goes on meanwhile.
   */
  | { kind: 'cut-worker'; slot: number; ms: number };

/** The faults drawn one after another from the schedule's stream (`pick`): their order is part of every seed. */
const DRAWN_FAULTS: readonly FaultKind[] = [
  'kill-worker',
  'freeze-worker',
  'crash-redis',
  'reset-offsets',
  'replay-dead-letters',
  'rolling-deploy',
];

/**
 * The exhaustion faults, drawn after the rest from a stream of their own (so the rest of a seed's schedule
 * is what it was without them): each kind is in a schedule with this chance, at a random place.
 */
export const EXHAUSTION_WEIGHTS: Readonly<Record<ExhaustionFault, number>> = {
  'fill-redis': 0.35,
  'stall-redis': 0.35,
  'cut-worker': 0.35,
};

export const FAULT_KINDS: readonly FaultKind[] = [...DRAWN_FAULTS, 'fill-redis', 'stall-redis', 'cut-worker'];

/** Bounds of one schedule: kept small so a schedule takes seconds, not minutes. */
const LIMITS = {
  events: [100, 300],
  faults: [2, 6],
  redisCrashes: 2,
  lockTtlMs: 1000,
  freezeMs: [1300, 2500],
  redisDownMs: [100, 1800],
  /** How long an older worker stays once it joined: from a fraction of a lease TTL to several. */
  rollingMs: [300, 5000],
  /** Redis full, stalled (from half a lease TTL to two and a half), a worker's path silent (up to four). */
  fillMs: [500, 3000],
  stallMs: [500, 2500],
  cutMs: [500, 4000],
  keys: [1, 24],
  /**
   * Parked modes: how long a parked head may fail before its dead letter. Poison is dead-lettered after
   * it; an event that fails for a while (`fail` past the retries in place) comes back well within it,
   * unless faults hold it back longer (then its dead letter is the documented outcome).
   */
  parkedMaxAgeMs: 6000,
} as const;

export function drawSchedule(seed: number): Schedule {
  const rng = new Prng(seed);
  const partitions = rng.int(1, 8);
  const workers = rng.int(1, 3);
  const groups: string[] = rng.chance(0.6) ? [GROUPS.fuzzIdem, GROUPS.fuzzPlain] : [GROUPS.fuzzIdem];
  const maxRetries = rng.int(1, 4);
  const consumer = {
    concurrency: rng.pick([1, 1, 2, 4]),
    batchSize: rng.pick([1, 5, 10, 20, 50]),
    lockTtlMs: LIMITS.lockTtlMs,
    heartbeatTtlMs: LIMITS.lockTtlMs,
    maxRetries,
    retryBackoffMs: 10,
    retryBackoffMaxMs: 80,
    // Far above the faults one schedule injects: only a real crash loop could reach it, and there is none.
    maxDeliveries: 50,
    ordering: rng.pick<Ordering>(['partition', 'key', 'key', 'unordered']),
  } as Schedule['consumer'];
  if (consumer.ordering !== 'partition') {
    consumer.redelivery = { delayMs: 40, factor: 2, maxDelayMs: 300, maxAgeMs: LIMITS.parkedMaxAgeMs };
  }
  const events = drawEvents(rng, groups, maxRetries, partitions, consumer.ordering !== 'partition');
  const steps = drawSteps(rng, events.length, workers, groups);
  addExhaustionFaults(new Prng(seed ^ EXHAUSTION_STREAM), steps, workers);
  return { seed, partitions, workers, groups, consumer, events, steps };
}

function drawEvents(rng: Prng, groups: readonly string[], maxRetries: number, partitions: number, parks: boolean): EventSpec[] {
  const count = rng.int(LIMITS.events[0], LIMITS.events[1]);
  const keys = rng.int(LIMITS.keys[0], LIMITS.keys[1]);
  const seqs = new Map<string, number>();
  const events: EventSpec[] = [];
  for (let n = 0; n < count; n++) {
    const event = rng.pick([EVENTS.fuzzBoth, EVENTS.fuzzBoth, EVENTS.fuzzBoth, EVENTS.fuzzFirst, EVENTS.fuzzNone]);
    const spec: EventSpec = { n, event, data: { n, seq: 0 } };
    if (rng.chance(0.8)) spec.key = `k${rng.int(0, keys - 1)}`;
    else if (rng.chance(0.5)) spec.partition = rng.int(0, partitions - 1);
    const chain = spec.key ?? `#${spec.partition ?? 0}`;
    spec.data.seq = (seqs.get(chain) ?? 0) + 1;
    seqs.set(chain, spec.data.seq);
    if (rng.chance(0.06)) spec.data.fail = rng.int(1, maxRetries);
    // Parked modes: some events fail past their retries in place, are parked (their key waits behind them in
    // 'key' mode) and recover at a redelivery.
    else if (parks && rng.chance(0.05)) spec.data.fail = rng.int(maxRetries + 1, maxRetries + 5);
    const handledBy = groups.filter((g) => g === GROUPS.fuzzIdem || event === EVENTS.fuzzBoth);
    if (event !== EVENTS.fuzzNone && rng.chance(0.04)) {
      const poison: Record<string, PoisonKind> = {};
      for (const g of handledBy) if (rng.chance(0.7)) poison[g] = rng.pick<PoisonKind>(['always', 'non-retryable']);
      if (Object.keys(poison).length > 0) spec.data.poison = poison;
    }
    events.push(spec);
  }
  return events;
}

function drawSteps(rng: Prng, eventCount: number, workers: number, groups: readonly string[]): Step[] {
  // The publishes, in order: single `publish` calls and `publishMany` batches of 2 to 25.
  const publishes: Step[] = [];
  for (let n = 0; n < eventCount;) {
    const size = rng.chance(0.35) ? 1 : Math.min(eventCount - n, rng.int(2, 25));
    publishes.push({ kind: 'publish', events: range(n, size), many: size > 1 || rng.chance(0.2) });
    n += size;
  }
  // Faults go between publishes (a few after the last one, while the groups catch up).
  const faults: Step[] = [];
  let redisCrashes = 0;
  for (let i = rng.int(LIMITS.faults[0], LIMITS.faults[1]); i > 0; i--) {
    let kind = rng.pick(DRAWN_FAULTS);
    if (kind === 'crash-redis' && redisCrashes >= LIMITS.redisCrashes) kind = 'kill-worker';
    faults.push(drawFault(rng, kind, workers, groups));
    if (kind === 'crash-redis') redisCrashes++;
  }
  const steps: Step[] = [];
  const slots = publishes.length + 2;
  const at = faults.map(() => rng.int(1, slots));
  publishes.forEach((publish, i) => {
    steps.push(publish, { kind: 'pause', ms: rng.int(0, 60) });
    faults.forEach((fault, f) => at[f] === i + 1 && steps.push(fault));
  });
  faults.forEach((fault, f) => at[f] > publishes.length && steps.push({ kind: 'pause', ms: rng.int(100, 600) }, fault));
  return steps;
}

/** Seeds the exhaustion faults' own stream (xor with the schedule's seed). */
const EXHAUSTION_STREAM = 0x5eed_fa17;

/**
 * Inserts each exhaustion fault the stream draws (by `EXHAUSTION_WEIGHTS`) after a random publish, or
 * after the last one with a pause before it, as the other faults go.
 */
function addExhaustionFaults(rng: Prng, steps: Step[], workers: number): void {
  for (const kind of Object.keys(EXHAUSTION_WEIGHTS) as ExhaustionFault[]) {
    if (!rng.chance(EXHAUSTION_WEIGHTS[kind])) continue;
    const fault = drawFault(rng, kind, workers, []);
    const publishes = steps.flatMap((step, i) => (step.kind === 'publish' ? [i] : []));
    const after = rng.int(0, publishes.length);
    if (after === publishes.length) steps.push({ kind: 'pause', ms: rng.int(100, 600) }, fault);
    // After the publish and its pause.
    else steps.splice(publishes[after] + 2, 0, fault);
  }
}

function drawFault(rng: Prng, kind: FaultKind, workers: number, groups: readonly string[]): Step {
  switch (kind) {
    case 'kill-worker':
      return { kind, slot: rng.int(0, workers - 1) };
    case 'freeze-worker':
      return { kind, slot: rng.int(0, workers - 1), ms: rng.int(LIMITS.freezeMs[0], LIMITS.freezeMs[1]) };
    case 'crash-redis':
      return { kind, downMs: rng.int(LIMITS.redisDownMs[0], LIMITS.redisDownMs[1]) };
    case 'reset-offsets':
    case 'replay-dead-letters':
      return { kind, group: rng.pick(groups) };
    case 'rolling-deploy':
      return { kind, ms: rng.int(LIMITS.rollingMs[0], LIMITS.rollingMs[1]), leave: rng.pick(['SIGTERM', 'SIGKILL'] as const) };
    case 'fill-redis':
      return { kind, ms: rng.int(LIMITS.fillMs[0], LIMITS.fillMs[1]) };
    case 'stall-redis':
      return { kind, ms: rng.int(LIMITS.stallMs[0], LIMITS.stallMs[1]) };
    case 'cut-worker':
      return { kind, slot: rng.int(0, workers - 1), ms: rng.int(LIMITS.cutMs[0], LIMITS.cutMs[1]) };
  }
}

function range(from: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => from + i);
}

/** The schedule in a few lines: the setup, then the faults, each with the publishes before it. */
export function describeSchedule(s: Schedule): string {
  const poisoned = s.events.filter((e) => e.data.poison).length;
  const failing = s.events.filter((e) => e.data.fail).length;
  const lines = [
    `seed ${s.seed}: ${s.partitions} partitions, ${s.workers} workers, groups ${s.groups.join(', ')}, ` +
      `consumer ${JSON.stringify(s.consumer)}; ${s.events.length} events (${failing} failing some attempts, ${poisoned} poison)`,
  ];
  let calls = { single: 0, many: 0 };
  let published = 0;
  const flush = (): void => {
    if (calls.single + calls.many > 0)
      lines.push(`  publish, ${calls.single} publish + ${calls.many} publishMany calls, up to event ${published - 1}`);
    calls = { single: 0, many: 0 };
  };
  s.steps.forEach((step, i) => {
    if (step.kind === 'pause') return;
    if (step.kind === 'publish') {
      calls[step.many ? 'many' : 'single']++;
      published += step.events.length;
      return;
    }
    flush();
    const { kind, ...args } = step;
    lines.push(`  step ${i}: ${kind} ${JSON.stringify(args)}`);
  });
  flush();
  return lines.join('\n');
}
