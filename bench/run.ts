// `npm run bench`: eventrail side by side with raw Redis Streams and BullMQ,
// interleaved round by round on one Redis, so the ratios hold on a noisy host.
//
//   --quick        small counts, one round: checks every scenario runs and handles every event
//   --aof          a second pass against a redis-server with appendonly yes, appendfsync always
//   --only a,b     only these scenarios (ids as printed)
//   --rounds N     rounds per scenario instead of each scenario's own
//   --pin MODE     separate: Redis on one core, the bench and its child processes on another;
//                  shared: all of them on one core; both (the full run's default): a pass each,
//                  the shared one with the core scenarios only; none (the quick run's default)
//   --variants a,b only these variants of each scenario (to profile one system: node --cpu-prof ...)
//
// EVENTRAIL_REDIS_URL: use that Redis (never flushed: every run uses a prefix of
// its own and deletes it). BENCH_ENFORCE=1: exit non-zero when a target is missed.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, release } from 'node:os';
import { join } from 'node:path';
import Redis from 'ioredis';
import { deletePrefix } from '../test/support/helpers';
import { scenarioFactories } from './scenarios';
import { BenchResult, PassResult, resultMarkdown, ScenarioResult, scenarioText, TargetResult, VariantResult } from './support/report';
import { BenchRedis, externalRedis, startRedisServer } from './support/redis-server';
import { info } from './support/redis-tools';
import { Measurement, Scenario, Size, Target, Variant } from './support/scenario';
import { summarize } from './support/stats';
import { BenchChild } from './support/children';
import type { VariantRunnerConfig } from './processes/variant-runner';

interface Args {
  size: Size;
  aof: boolean;
  only?: string[];
  variants?: string[];
  rounds?: number;
  pin?: Pinning;
}

type Pinning = 'separate' | 'shared' | 'both' | 'none';

const RESULTS_DIR = join(__dirname, 'results');
let current: BenchRedis | undefined;

function parseArgs(argv: string[]): Args {
  const args: Args = { size: 'full', aof: false };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2);
    const value = (): string => inline ?? argv[++i] ?? '';
    if (flag === '--quick') args.size = 'quick';
    else if (flag === '--aof') args.aof = true;
    else if (flag === '--only') args.only = value().split(',');
    else if (flag === '--variants') args.variants = value().split(',');
    else if (flag === '--rounds') args.rounds = Number(value());
    else if (flag === '--pin') args.pin = value() as Pinning;
    else
      throw new Error(
        `unknown argument ${argv[i]} (known: --quick, --aof, --only a,b, --variants a,b, --rounds N, --pin separate|shared|both|none)`,
      );
  }
  if (args.rounds !== undefined && !(Number.isInteger(args.rounds) && args.rounds > 0))
    throw new Error('--rounds needs a positive integer');
  if (args.pin !== undefined && !['separate', 'shared', 'both', 'none'].includes(args.pin))
    throw new Error(`--pin takes separate, shared, both or none, not ${args.pin}`);
  return args;
}

/** One run of one variant on fresh state: a flushed server of our own, or a new prefix deleted afterwards. */
async function runOnce(variant: Variant, redis: BenchRedis, admin: Redis, scenario: string): Promise<Measurement> {
  const prefix = `bench-${scenario}-${randomBytes(4).toString('hex')}`;
  if (redis.owned) await admin.flushall();
  try {
    const measurement = await variant.run({ url: redis.url, admin, prefix });
    if (measurement.done < measurement.expected) {
      throw new Error(`${variant.label}: ${measurement.done} of ${measurement.expected} events`);
    }
    return measurement;
  } finally {
    if (!redis.owned) await deletePrefix(admin, prefix);
  }
}

/** The per-round ratios (or values) of a target and, when `judge`, whether their median meets it. */
function evaluate(target: Target, variants: VariantResult[], judge: boolean): TargetResult {
  const own = variants.find((v) => v.id === target.variant);
  const references = (target.bestOf ?? (target.reference ? [target.reference] : [])).map((id) => variants.find((v) => v.id === id));
  const rounds = Math.min(own?.rounds.length ?? 0, ...references.map((r) => r?.rounds.length ?? 0));
  const perRound: number[] = [];
  const bases: Array<number | undefined> = [];
  for (let i = 0; i < rounds; i++) {
    bases.push(references.length === 0 ? undefined : Math.max(...references.map((r) => (r as VariantResult).rounds[i][target.metric])));
  }
  const quiet = Math.min(...bases.filter((b): b is number => b !== undefined));
  let dropped = 0;
  for (let i = 0; i < rounds; i++) {
    const value = (own as VariantResult).rounds[i][target.metric];
    const base = bases[i];
    if (target.quietFactor !== undefined && base !== undefined && base > target.quietFactor * quiet) {
      dropped++;
      continue;
    }
    perRound.push(base === undefined ? value : target.difference ? value - base : value / base);
  }
  const result: TargetResult = {
    label: target.label,
    perRound,
    atLeast: target.atLeast,
    atMost: target.atMost,
    difference: target.difference,
    ...(dropped > 0 ? { dropped } : {}),
  };
  if (perRound.length === 0) return result;
  result.summary = summarize(perRound);
  if (!judge) return result;
  if (target.atLeast !== undefined) result.met = result.summary.median >= target.atLeast;
  else if (target.atMost !== undefined) result.met = result.summary.median <= target.atMost;
  return result;
}

/**
 * Warm-up (full size only), then the rounds, each running every variant once, the order turning
 * round by round (A B C, C B A, A B C ...): a drift of the host over a round (a warming cache, a
 * neighbour's burst) then weighs on each variant alike.
 */
async function runScenario(
  scenario: Scenario,
  warmup: Scenario | undefined,
  unjudged: boolean,
  redis: BenchRedis,
  admin: Redis,
): Promise<ScenarioResult> {
  const started = performance.now();
  const loadBefore = loadavg()[0];
  const variants: VariantResult[] = scenario.variants.map((v) => ({ id: v.id, label: v.label, events: v.events, rounds: [] }));
  const errors: string[] = [];
  try {
    for (const variant of warmup?.variants ?? []) await runOnce(variant, redis, admin, scenario.id);
    for (let round = 0; round < scenario.rounds; round++) {
      const order = scenario.variants.map((_, i) => i);
      if (round % 2 === 1) order.reverse();
      for (const i of order) variants[i].rounds.push((await runOnce(scenario.variants[i], redis, admin, scenario.id)).metrics);
    }
  } catch (error) {
    errors.push((error as Error).stack ?? String(error));
  }
  // Ratios only over rounds in which every variant ran.
  const complete = Math.min(...variants.map((v) => v.rounds.length));
  for (const v of variants) v.rounds.length = complete;
  // Quick runs are too small to say anything about speed: they only check that everything ran. A pass
  // whose targets are not judged (pinned to one core, AOF) reports its ratios only.
  const targets = scenario.targets.map((t) => evaluate(t, variants, !unjudged));
  return {
    id: scenario.id,
    title: scenario.title,
    metrics: scenario.metrics,
    variants,
    targets,
    errors,
    seconds: (performance.now() - started) / 1000,
    load: [loadBefore, loadavg()[0]],
  };
}

async function runPass(redis: BenchRedis, args: Args, label: string, judged: boolean, sharedCore: boolean): Promise<PassResult> {
  const started = performance.now();
  const admin = new Redis(redis.url);
  try {
    const redisVersion = (await info(admin, 'server')).get('redis_version') ?? '?';
    console.log(`\n#### ${label}: Redis ${redisVersion} at ${redis.url}`);
    const scenarios: ScenarioResult[] = [];
    for (const factory of scenarioFactories) {
      const scenario = factory(args.size);
      if (args.only && !args.only.includes(scenario.id)) continue;
      if (sharedCore && !scenario.sharedCore) continue;
      if (args.rounds) scenario.rounds = args.rounds;
      const warmup = args.size === 'full' && scenario.warmup ? factory('quick') : undefined;
      for (const s of [scenario, warmup]) {
        if (s && args.variants) s.variants = s.variants.filter((v) => args.variants?.includes(v.id));
      }
      const children = scenario.isolated ? isolate(scenario, warmup, args.size, redis.url) : [];
      let result: ScenarioResult;
      try {
        result = await runScenario(scenario, warmup, args.size === 'quick' || !judged, redis, admin);
      } finally {
        await Promise.all(children.map((child) => child.stop()));
      }
      console.log(scenarioText(result));
      scenarios.push(result);
    }
    return { redis: label, redisVersion, scenarios, seconds: (performance.now() - started) / 1000, judged };
  } finally {
    admin.disconnect();
  }
}

/**
 * Runs each variant of `scenario` (and of its warm-up) in a process of its own, one per variant for the
 * whole scenario (`Scenario.isolated`); returns the processes, to stop when the scenario is done.
 */
function isolate(scenario: Scenario, warmup: Scenario | undefined, size: Size, url: string): BenchChild[] {
  const children = new Map<string, { child: BenchChild; ready: Promise<unknown> }>();
  const childOf = (id: string): { child: BenchChild; ready: Promise<unknown> } => {
    let found = children.get(id);
    if (!found) {
      const config: VariantRunnerConfig = { url, scenario: scenario.id, variant: id };
      const child = new BenchChild('variant-runner', config);
      found = { child, ready: child.next('ready', 120_000) };
      found.ready.catch(() => undefined); // awaited by each run
      children.set(id, found);
    }
    return found;
  };
  // The warm-up runs at the rounds' size: a process of its own starts cold, and 2,000 events left eventrail's
  // publishing still getting faster over the seven rounds after it (client CPU 4.1 -> 2.6 µs per event).
  for (const [s, sizeOf] of [
    [scenario, size],
    [warmup, size],
  ] as const) {
    for (const variant of s?.variants ?? []) {
      const { child, ready } = childOf(variant.id);
      variant.run = async ({ prefix }) => {
        await ready;
        child.send({ type: 'run', prefix, size: sizeOf });
        return (await child.next('measured', 600_000)).measurement;
      };
    }
  }
  return [...children.values()].map(({ child }) => child);
}

/**
 * Pins every thread of `pid` to `cpus` (a taskset list: "0", "0-1"); threads and child processes
 * started later inherit it. Without taskset (or on one core) it says so and leaves the process as it is.
 */
function pin(pid: number, cpus: string): boolean {
  try {
    execFileSync('taskset', ['-a', '-cp', cpus, String(pid)], { stdio: 'ignore' });
    return true;
  } catch (error) {
    console.warn(`taskset could not pin pid ${pid} to ${cpus}: ${(error as Error).message}`);
    return false;
  }
}

/** The passes of a run on a server of our own: pinning (separate cores, then one shared core), then the AOF. */
function passPlan(args: Args): Array<{ persistence: 'none' | 'aof-always'; pinning: 'separate' | 'shared' | 'none' }> {
  const mode = args.pin ?? (args.size === 'quick' ? 'none' : 'both');
  const cores = availableParallelism() >= 2;
  if (!cores && mode !== 'none') console.warn('One CPU: the passes run unpinned');
  const pinnings = !cores || mode === 'none' ? (['none'] as const) : mode === 'both' ? (['separate', 'shared'] as const) : [mode];
  const plan: ReturnType<typeof passPlan> = pinnings.map((pinning) => ({ persistence: 'none' as const, pinning }));
  if (args.aof) plan.push({ persistence: 'aof-always', pinning: pinnings[0] === 'shared' ? 'shared' : pinnings[0] });
  return plan;
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const started = performance.now();
  const passes: PassResult[] = [];
  const external = process.env.EVENTRAIL_REDIS_URL;
  if (external) {
    if (args.aof) console.warn('--aof is ignored with EVENTRAIL_REDIS_URL: that server keeps its own persistence settings');
    passes.push(await runPass(await externalRedis(external), args, 'EVENTRAIL_REDIS_URL (prefixes, never flushed)', true, false));
  } else {
    const all = `0-${availableParallelism() - 1}`;
    const plan = passPlan(args);
    for (const { persistence, pinning } of plan) {
      current = await startRedisServer(persistence);
      try {
        // Redis on core 0; the bench (and the processes it starts) on core 1, or on core 0 beside it.
        if (pinning !== 'none') {
          pin(current.pid as number, '0');
          pin(process.pid, pinning === 'separate' ? '1' : '0');
        }
        const where = { separate: ', Redis and the bench on separate cores', shared: ', Redis and the bench on one core', none: '' }[
          pinning
        ];
        const label = (persistence === 'none' ? 'no persistence' : '`appendonly yes`, `appendfsync always`') + where;
        // Targets are judged on the first pass without persistence; the others are reported.
        const judged = persistence === 'none' && plan.findIndex((p) => p.persistence === 'none') === passes.length;
        passes.push(await runPass(current, args, label, judged, pinning === 'shared' && plan.some((p) => p.pinning === 'separate')));
      } finally {
        await current.stop();
        current = undefined;
        if (pinning !== 'none') pin(process.pid, all);
      }
    }
  }
  const result: BenchResult = {
    date: new Date().toISOString(),
    size: args.size,
    machine: { nproc: availableParallelism(), cpu: cpus()[0]?.model ?? '?', node: process.version, os: `Linux ${release()}` },
    passes,
    seconds: (performance.now() - started) / 1000,
  };
  const name = args.size === 'quick' ? 'quick' : 'latest';
  const markdown = resultMarkdown(result);
  mkdirSync(RESULTS_DIR, { recursive: true });
  writeFileSync(join(RESULTS_DIR, `${name}.json`), JSON.stringify(result, null, 2) + '\n');
  writeFileSync(join(RESULTS_DIR, `${name}.md`), markdown);
  console.log(`\n${markdown}\nWritten: bench/results/${name}.json, bench/results/${name}.md`);
  return exitCode(result);
}

/** 1 when a scenario failed or did not run; with BENCH_ENFORCE=1 also when a target was missed. */
function exitCode(result: BenchResult): number {
  const scenarios = result.passes.flatMap((p) => p.scenarios);
  const failed = scenarios.filter((s) => s.errors.length > 0 || s.variants.some((v) => v.rounds.length === 0));
  if (scenarios.length === 0) console.error('No scenario ran (check --only).');
  for (const s of failed) console.error(`FAILED: ${s.title}`);
  const missed = result.passes.flatMap((p) => (p.judged ? p.scenarios.flatMap((s) => s.targets.filter((t) => t.met === false)) : []));
  if (missed.length > 0) console.log(`Targets missed: ${missed.map((t) => t.label).join('; ')}`);
  if (scenarios.length === 0 || failed.length > 0) return 1;
  if (process.env.BENCH_ENFORCE === '1' && missed.length > 0) {
    console.error('BENCH_ENFORCE=1: exiting with 1 because targets were missed');
    return 1;
  }
  return 0;
}

for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const) {
  process.once(signal, () => {
    console.error(`${signal}: stopping`);
    void (current?.stop() ?? Promise.resolve()).finally(() => process.exit(code));
  });
}

void main()
  .catch((error: unknown) => {
    console.error((error as Error).stack ?? String(error));
    return 1;
  })
  .then((code) => process.exit(code));
