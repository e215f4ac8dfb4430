import type Redis from 'ioredis';

export type Size = 'quick' | 'full';

/** What a variant's run gets: a Redis, and a key prefix of its own whose keys are deleted afterwards. */
export interface RunContext {
  url: string;
  /** A plain client for setup and inspection (INFO, fills of raw references). */
  admin: Redis;
  prefix: string;
}

/** One run of one variant. */
export interface Measurement {
  metrics: Record<string, number>;
  /** Events the run had to publish or handle, and how many it did: the quick run checks they match. */
  expected: number;
  done: number;
}

/** One system measured in a scenario: eventrail or one of its references. */
export interface Variant {
  id: string;
  label: string;
  /** Events per run, for the report. */
  events: number;
  run(ctx: RunContext): Promise<Measurement>;
}

export interface MetricSpec {
  key: string;
  unit: string;
  digits: number;
}

/**
 * A target: the median over rounds of a per-round ratio (variant / reference,
 * both from the same round) or of a variant's own value, against a bound.
 * Without a bound it is reported for information only.
 */
export interface Target {
  label: string;
  variant: string;
  metric: string;
  /** Divide by this variant's value from the same round (or subtract it, with `difference`). */
  reference?: string;
  /** Judge `variant - reference` instead of `variant / reference` (latency: "at most 0.1 ms above raw"). */
  difference?: boolean;
  /**
   * Judge only the rounds in which the reference's value is at most this many times its lowest over
   * the rounds (its quiet value): a round where the host stalled the reference too says nothing.
   */
  quietFactor?: number;
  /** The reference is the best (highest) of these variants in each round: "BullMQ at its best setting". */
  bestOf?: string[];
  atLeast?: number;
  atMost?: number;
}

export interface Scenario {
  id: string;
  title: string;
  metrics: MetricSpec[];
  rounds: number;
  /** Run every variant once at quick size first, unrecorded, so the JIT and connections are warm. */
  warmup: boolean;
  variants: Variant[];
  targets: Target[];
  /** Also run in the pass where Redis and the bench share one core (the core scenarios only: it doubles their time). */
  sharedCore?: boolean;
  /**
   * Run each variant in a process of its own for the whole scenario (bench/processes/variant-runner.ts),
   * its warm-up included: variants whose hot paths share code (ioredis's) must not shape each other's JIT.
   */
  isolated?: boolean;
}

export type ScenarioFactory = (size: Size) => Scenario;

export const RATE: MetricSpec = { key: 'rate', unit: 'events/s', digits: 0 };
