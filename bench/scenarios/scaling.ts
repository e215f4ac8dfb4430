import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type Redis from 'ioredis';
import { EventrailKeys } from '../../lib/redis/keys';
import { BenchChild } from '../support/children';
import { commandCount, info } from '../support/redis-tools';
import { Measurement, RATE, RunContext, Scenario, Size, Variant } from '../support/scenario';
import { workerProcesses } from './drain';

/** Group names of the scaling application (bench/processes/scale-app.ts). */
export function scaleGroups(count: number): string[] {
  return Array.from({ length: count }, (_, g) => `scale-g${g}`);
}

export interface ScaleAppConfig {
  url: string;
  prefix: string;
  partitions: number;
  groups: number;
}

interface Shape {
  partitions: number;
  groups: number;
  processes: number;
}

/** partitions × groups × processes, from one of each to 64 partitions, 8 groups and 3 processes. */
const LADDER: Record<Size, Shape[]> = {
  quick: [
    { partitions: 1, groups: 1, processes: 1 },
    { partitions: 8, groups: 2, processes: 2 },
  ],
  full: [
    { partitions: 1, groups: 1, processes: 1 },
    { partitions: 8, groups: 2, processes: 2 },
    { partitions: 16, groups: 4, processes: 3 },
    { partitions: 64, groups: 8, processes: 3 },
  ],
};
/** The idle window in which commands are counted. */
const WINDOW_MS = { quick: 1_000, full: 10_000 };
/** A join or a leave that has not settled by then fails the run. */
const REBALANCE_TIMEOUT_MS = 120_000;
/** As in the idle scenario: no heap-shrinking GC in the window, a one-time cost of any new Node process. */
const NODE_ARGS = ['--no-memory-reducer'];

/**
 * How cost grows with the work: for each (partitions × groups × processes),
 * worker processes of an application with that many groups (no-op handlers,
 * an empty log, the default options) measure the Redis connections each
 * process holds, the commands Redis runs per second while they idle (INFO
 * commandstats, scripts' own commands included), each process's RSS (from
 * /proc: started through @swc-node/register, so the TypeScript compiler is in
 * it too; `rssReady` is the same process before its consumers start), and how
 * long the fleet takes to split every group's partitions fairly again after
 * the last process joins (its consumers start) and after it leaves (a
 * graceful shutdown).
 */
export function scaling(size: Size): Scenario {
  const windowMs = WINDOW_MS[size];
  const variant = (shape: Shape): Variant => ({
    id: `${shape.partitions}x${shape.groups}x${shape.processes}`,
    label: `${shape.partitions} partitions × ${shape.groups} groups × ${shape.processes} processes`,
    events: 0,
    run: (ctx) => measure(ctx, shape, windowMs),
  });
  const variants = LADDER[size].map(variant);
  return {
    id: 'scaling',
    title: 'How cost grows: partitions × groups × processes, idle',
    metrics: [
      { key: 'connections', unit: 'Redis connections per process', digits: 1 },
      { key: 'redisConnections', unit: 'Redis connections of the fleet', digits: 0 },
      { key: 'commands', unit: 'idle commands/s per process', digits: 1 },
      { key: 'rssMiB', unit: 'RSS per process, MiB', digits: 1 },
      { key: 'rssReadyMiB', unit: 'RSS before consumers start, MiB', digits: 1 },
      { key: 'joinMs', unit: 'ms to a fair split after a join', digits: 0 },
      { key: 'leaveMs', unit: 'ms to a fair split after a leave (0: one process)', digits: 0 },
    ],
    rounds: size === 'quick' ? 1 : 2,
    warmup: false,
    variants,
    targets: variants.flatMap((v) => [
      { label: `${v.id}: connections per process`, variant: v.id, metric: 'connections' },
      { label: `${v.id}: idle commands/s per process`, variant: v.id, metric: 'commands' },
      { label: `${v.id}: RSS per process (MiB)`, variant: v.id, metric: 'rssMiB' },
      { label: `${v.id}: join (ms)`, variant: v.id, metric: 'joinMs' },
      { label: `${v.id}: leave (ms)`, variant: v.id, metric: 'leaveMs' },
    ]),
  };
}

/** Drain throughput over 8 partitions (concurrency 8) as worker processes are added. */
export function scalingDrain(size: Size): Scenario {
  const events = size === 'quick' ? 4_000 : 100_000;
  const variant = (processes: number): Variant => ({
    id: `w${processes}`,
    label: `eventrail, 8 partitions, concurrency 8, ${processes} process${processes > 1 ? 'es' : ''}`,
    events,
    run: (ctx) => workerProcesses(ctx, events, { partitions: 8, concurrency: 8, processes }),
  });
  return {
    id: 'scaling-drain',
    title: 'How cost grows: drain 8 partitions with 1, 2 and 4 worker processes',
    metrics: [RATE],
    rounds: size === 'quick' ? 1 : 3,
    warmup: false,
    variants: [variant(1), variant(2), variant(4)],
    targets: [
      { label: 'drain 8 partitions, 1 process (events/s)', variant: 'w1', metric: 'rate' },
      { label: 'drain 8 partitions, 2 processes / 1', variant: 'w2', reference: 'w1', metric: 'rate' },
      { label: 'drain 8 partitions, 4 processes / 1', variant: 'w4', reference: 'w1', metric: 'rate' },
    ],
  };
}

async function measure(ctx: RunContext, shape: Shape, windowMs: number): Promise<Measurement> {
  const keys = new EventrailKeys(ctx.prefix, shape.partitions);
  const groups = scaleGroups(shape.groups);
  const config: ScaleAppConfig = { url: ctx.url, prefix: ctx.prefix, partitions: shape.partitions, groups: shape.groups };
  const baseline = await connectedClients(ctx.admin);
  const children: BenchChild[] = [];
  const launch = async (): Promise<BenchChild> => {
    const child = new BenchChild('scale-app', config, NODE_ARGS);
    children.push(child);
    await child.next('ready', 120_000);
    return child;
  };
  const start = async (child: BenchChild): Promise<void> => {
    const started = child.next('window-open', 60_000);
    child.send({ type: 'start' });
    await started;
  };
  try {
    for (let i = 0; i < shape.processes - 1; i++) await start(await launch());
    if (shape.processes > 1) await balanced(ctx.admin, keys, groups, shape.partitions, shape.processes - 1);

    const joiner = await launch();
    const rssReady = rssMiB(joiner);
    const joinStarted = performance.now();
    joiner.send({ type: 'start' });
    await balanced(ctx.admin, keys, groups, shape.partitions, shape.processes);
    const joinMs = performance.now() - joinStarted;

    // The fleet idles: count what it costs over the window.
    const commandsBefore = await commandCount(ctx.admin);
    const windowStarted = performance.now();
    await sleep(windowMs);
    const commands = ((await commandCount(ctx.admin)) - commandsBefore) / ((performance.now() - windowStarted) / 1000);
    const redisConnections = (await connectedClients(ctx.admin)) - baseline;
    const rss = children.map(rssMiB);

    let leaveMs = 0;
    if (shape.processes > 1) {
      const leaver = children.pop() as BenchChild;
      const leaveStarted = performance.now();
      const stopped = leaver.stop();
      await balanced(ctx.admin, keys, groups, shape.partitions, shape.processes - 1);
      leaveMs = performance.now() - leaveStarted;
      await stopped;
    }
    return {
      metrics: {
        connections: redisConnections / shape.processes,
        redisConnections,
        commands: commands / shape.processes,
        rssMiB: rss.reduce((sum, r) => sum + r, 0) / rss.length,
        rssReadyMiB: rssReady,
        joinMs,
        leaveMs,
      },
      expected: 0,
      done: 0,
    };
  } finally {
    await Promise.all(children.map((c) => c.stop()));
  }
}

async function connectedClients(redis: Redis): Promise<number> {
  return Number((await info(redis, 'clients')).get('connected_clients'));
}

/** Resident memory of a child process (Linux: /proc/<pid>/status). */
function rssMiB(child: BenchChild): number {
  const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
  const kib = Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1] ?? NaN);
  return kib / 1024;
}

/**
 * Waits until every group's partitions are all leased, by exactly `members`
 * workers, none holding more than its fair share (`ceil(partitions /
 * members)`, what each worker aims at).
 */
async function balanced(redis: Redis, keys: EventrailKeys, groups: string[], partitions: number, members: number): Promise<void> {
  const leaseKeys = groups.flatMap((g) => Array.from({ length: partitions }, (_, p) => keys.lease(g, p)));
  const share = Math.ceil(partitions / members);
  const deadline = Date.now() + REBALANCE_TIMEOUT_MS;
  let values: Array<string | null> = [];
  for (;;) {
    values = await redis.mget(...leaseKeys);
    if (groups.every((_, g) => fair(values.slice(g * partitions, (g + 1) * partitions), members, share))) return;
    if (Date.now() > deadline) throw new Error(`scaling: no fair split over ${members} workers: ${JSON.stringify(values)}`);
    await sleep(5);
  }
}

function fair(leases: Array<string | null>, members: number, share: number): boolean {
  const held = new Map<string, number>();
  for (const lease of leases) {
    if (lease === null) return false;
    const owner = lease.slice(0, lease.lastIndexOf(':'));
    held.set(owner, (held.get(owner) ?? 0) + 1);
  }
  return held.size === members && [...held.values()].every((n) => n <= share);
}
