import type Redis from 'ioredis';
import { EventrailPublisher } from '../../lib';
import { BenchChild } from '../support/children';
import { Countdown } from '../support/countdown';
import { createEventrailApp } from '../support/eventrail-app';
import { BENCH_EVENT, PAYLOAD } from '../support/payload';
import { commandCount } from '../support/redis-tools';
import { Measurement, RunContext, Scenario, Size, Variant } from '../support/scenario';

/** The idle application's groups (bench/processes/idle-app.ts). */
export const IDLE_GROUPS = ['idle-mailer', 'idle-ledger', 'idle-audit'];

export interface IdleAppConfig {
  url: string;
  prefix: string;
  partitions: number;
  /** Time after start before the window opens. */
  settleMs: number;
  windowMs: number;
}

/**
 * V8 shrinks a new process's heap once, with three full GCs (~100 ms of CPU),
 * 8 s or more after its last startup GC, so sometimes inside the window: a
 * one-time cost of any Node process, not an idle one. The idle process runs
 * without it; every other GC still counts.
 */
const NODE_ARGS = ['--no-memory-reducer'];
/** Time from start to the idle window, so startup traffic is not counted. */
const SETTLE_MS = { quick: 500, full: 3_000 };

/**
 * Idle: an application process with three groups and nothing to do. Counts
 * Redis commands in the window (`INFO commandstats`, which also counts the
 * commands inside Lua scripts), the requests clients sent (`MONITOR`, without
 * script internals) and the process's CPU time.
 */
export function idle(size: Size): Scenario {
  const windowMs = size === 'quick' ? 1_000 : 10_000;
  const variant = (id: string, partitions: number): Variant => ({
    id,
    label: `eventrail, 3 groups × ${partitions} partition${partitions > 1 ? 's' : ''}`,
    events: IDLE_GROUPS.length,
    run: (ctx) => measure(ctx, { url: ctx.url, prefix: ctx.prefix, partitions, settleMs: SETTLE_MS[size], windowMs }),
  });
  return {
    id: 'idle',
    title: `Idle for ${windowMs / 1000} s`,
    metrics: [
      { key: 'commands', unit: 'commands/s per group', digits: 2 },
      { key: 'requests', unit: 'requests/s per group', digits: 2 },
      { key: 'cpu', unit: '% of a core', digits: 3 },
    ],
    rounds: size === 'quick' ? 1 : 2,
    warmup: false,
    variants: [variant('p1', 1), variant('p8', 8)],
    targets: [
      { label: 'idle Redis commands/s per group (3 groups, defaults)', variant: 'p1', metric: 'commands', atMost: 2 },
      { label: 'idle CPU, % of a core (3 groups, defaults)', variant: 'p1', metric: 'cpu', atMost: 0.5 },
      { label: 'idle Redis commands/s per group (3 groups × 8 partitions)', variant: 'p8', metric: 'commands' },
    ],
  };
}

/** Counts what clients send while the monitor runs, leaving out the benchmark's own INFO. */
async function monitorRequests(admin: Redis): Promise<{ count: () => number; stop: () => void }> {
  const monitor = await admin.monitor();
  let requests = 0;
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source !== 'lua' && args[0]?.toLowerCase() !== 'info') requests++;
  });
  return { count: () => requests, stop: () => monitor.disconnect() };
}

async function measure(ctx: RunContext, config: IdleAppConfig): Promise<Measurement> {
  const groups = IDLE_GROUPS.length;
  const app = new BenchChild('idle-app', config, NODE_ARGS);
  const handled = new Countdown(groups);
  app.on((report) => {
    if (report.type === 'progress') handled.hit();
  });
  try {
    await app.next('ready', 60_000);
    const opened = app.next('window-open', 30_000);
    app.send({ type: 'start' });
    await opened;
    const monitor = await monitorRequests(ctx.admin);
    let window: { cpuMicros: number; elapsedMs: number; commands: number; requests: number };
    try {
      const commandsBefore = await commandCount(ctx.admin);
      const closed = await app.next('window-closed', config.windowMs + 10_000);
      window = { ...closed, commands: (await commandCount(ctx.admin)) - commandsBefore, requests: monitor.count() };
    } finally {
      monitor.stop();
    }
    const { cpuMicros, elapsedMs, commands, requests } = window;
    await publishOne(ctx, config.partitions);
    await handled.wait(10_000, 'idle groups after the window');
    const perGroupPerSecond = (n: number): number => (n * 1000) / elapsedMs / groups;
    return {
      metrics: { commands: perGroupPerSecond(commands), requests: perGroupPerSecond(requests), cpu: cpuMicros / 10 / elapsedMs },
      expected: groups,
      done: handled.count,
    };
  } finally {
    await app.stop();
  }
}

/** One event after the window: every group must still handle it. */
async function publishOne(ctx: RunContext, partitions: number): Promise<void> {
  const publisher = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix, partitions });
  try {
    await publisher.get(EventrailPublisher).publish(BENCH_EVENT, PAYLOAD);
  } finally {
    await publisher.close();
  }
}
