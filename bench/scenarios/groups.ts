import type Redis from 'ioredis';
import { BenchChild } from '../support/children';
import { createEventrailApp, fillLog } from '../support/eventrail-app';
import { commandCount, info } from '../support/redis-tools';
import { Measurement, RATE, RunContext, Scenario, Size, Target, Variant } from '../support/scenario';
import { perSecond } from '../support/stats';
import { drainDeadline } from './drain';

/** Partitions of the log every group reads. */
const PARTITIONS = 4;
/** Events are spread over this many keys, so every partition gets a share. */
const KEYS = 1000;
/** The backlog each group drains. */
const EVENTS: Record<Size, number> = { quick: 2_000, full: 40_000 };
/** Group counts compared. */
const GROUP_COUNTS = [1, 4, 16];
/** Entries per stream a raw reader asks for in one XREAD. */
export const RAW_COUNT = 200;

/** How the reading process reads: eventrail with or without packed backlog reads, or raw XREAD readers. */
export type GroupsReadMode = 'packed' | 'xread' | 'raw';

/** What bench/processes/groups-reader.ts is started with. */
export interface GroupsReaderConfig {
  url: string;
  prefix: string;
  partitions: number;
  groups: number;
  /** Events in the backlog: every group (or raw reader) handles them all. */
  events: number;
  mode: GroupsReadMode;
  /** CLIENT SETNAME of every connection the process opens. */
  clientName: string;
}

/** Consumer group names of the reading process. */
export function groupNames(count: number): string[] {
  return Array.from({ length: count }, (_, g) => `groups-g${g}`);
}

const MODES: Array<{ mode: GroupsReadMode; label: string }> = [
  { mode: 'packed', label: 'eventrail, packedBacklogReads: true' },
  { mode: 'xread', label: 'eventrail, packedBacklogReads: false' },
  { mode: 'raw', label: `raw \`XREAD COUNT ${RAW_COUNT}\` readers, prefetching` },
];

/**
 * How Redis's cost grows with consumer groups: G groups (1, 4, 16) each drain
 * the same prefilled log of 4 partitions, as eventrail groups (no-op handlers,
 * concurrency 4, packed backlog reads on and off) and as G raw readers that
 * each read all 4 partitions with one `XREAD COUNT 200` on a connection of
 * their own, asking for the next batch before handling the current one and
 * committing nothing. Both sides run in one child process started per run,
 * so each has the same two cores to share with Redis. Over the drain only
 * (from "start" to the last group done): Redis main-thread CPU (INFO cpu) and
 * commands (INFO commandstats, script internals included) per published
 * event, the reading process's CPU per published event, and the Redis
 * connections it holds (CLIENT LIST by its client name).
 */
export function groups(size: Size): Scenario {
  const events = EVENTS[size];
  const variants: Variant[] = GROUP_COUNTS.flatMap((count) =>
    MODES.map(({ mode, label }) => ({
      id: `${mode}-g${count}`,
      label: `${label}, ${count} group${count > 1 ? 's' : ''}`,
      events: events * count,
      run: (ctx: RunContext) => measure(ctx, events, count, mode),
    })),
  );
  const targets: Target[] = GROUP_COUNTS.flatMap((count) => [
    { label: `g${count}: Redis CPU per event, packed (us)`, variant: `packed-g${count}`, metric: 'redisUs' },
    { label: `g${count}: Redis CPU per event, XREAD (us)`, variant: `xread-g${count}`, metric: 'redisUs' },
    { label: `g${count}: Redis CPU per event, raw (us)`, variant: `raw-g${count}`, metric: 'redisUs' },
    { label: `g${count}: Redis CPU, packed / raw`, variant: `packed-g${count}`, reference: `raw-g${count}`, metric: 'redisUs' },
    { label: `g${count}: Redis CPU, XREAD / raw`, variant: `xread-g${count}`, reference: `raw-g${count}`, metric: 'redisUs' },
    { label: `g${count}: drain rate, packed / raw`, variant: `packed-g${count}`, reference: `raw-g${count}`, metric: 'rate' },
    { label: `g${count}: drain rate, XREAD / raw`, variant: `xread-g${count}`, reference: `raw-g${count}`, metric: 'rate' },
  ]);
  return {
    id: 'groups',
    title: `How cost grows with groups: 1, 4 and 16 groups drain ${events.toLocaleString('en-US')} events over ${PARTITIONS} partitions`,
    metrics: [
      { ...RATE, unit: 'published events/s, until every group is done' },
      { key: 'redisUs', unit: 'Redis main-thread CPU per published event, us', digits: 2 },
      { key: 'commands', unit: 'Redis commands per published event', digits: 3 },
      { key: 'clientUs', unit: 'reading process CPU per published event, us', digits: 1 },
      { key: 'connections', unit: 'Redis connections of the reading process', digits: 0 },
    ],
    rounds: size === 'quick' ? 1 : 3,
    warmup: false,
    variants,
    targets,
  };
}

async function measure(ctx: RunContext, events: number, count: number, mode: GroupsReadMode): Promise<Measurement> {
  const publisher = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix, partitions: PARTITIONS });
  try {
    await fillLog(publisher, events, KEYS);
  } finally {
    await publisher.close();
  }
  const config: GroupsReaderConfig = {
    url: ctx.url,
    prefix: ctx.prefix,
    partitions: PARTITIONS,
    groups: count,
    events,
    mode,
    clientName: `${ctx.prefix}-reader`,
  };
  const reader = new BenchChild('groups-reader', config);
  try {
    await reader.next('ready', 60_000);
    const cpuBefore = await mainThreadCpuUs(ctx.admin);
    const commandsBefore = await commandCount(ctx.admin);
    const started = performance.now();
    const done = reader.next('done', drainDeadline(events * count));
    reader.send({ type: 'start' });
    const report = await done;
    const ms = performance.now() - started;
    const redisUs = (await mainThreadCpuUs(ctx.admin)) - cpuBefore;
    const commands = (await commandCount(ctx.admin)) - commandsBefore;
    const connections = await namedConnections(ctx.admin, config.clientName);
    return {
      metrics: {
        rate: perSecond(events, ms),
        redisUs: redisUs / events,
        commands: commands / events,
        clientUs: ((report.cpuMs ?? NaN) * 1000) / events,
        connections,
      },
      expected: events * count,
      done: report.sent,
    };
  } finally {
    await reader.stop();
  }
}

/** CPU time of Redis's main thread so far (user + system), in microseconds. */
async function mainThreadCpuUs(redis: Redis): Promise<number> {
  const cpu = await info(redis, 'cpu');
  const seconds = Number(cpu.get('used_cpu_user_main_thread')) + Number(cpu.get('used_cpu_sys_main_thread'));
  if (!Number.isFinite(seconds)) throw new Error('groups: INFO cpu has no used_cpu_*_main_thread (Redis 6.2 or later reports them)');
  return seconds * 1e6;
}

/** Connections whose client name is `name`. */
async function namedConnections(redis: Redis, name: string): Promise<number> {
  const list = (await redis.client('LIST')) as string;
  return list.split('\n').filter((line) => line.includes(` name=${name} `)).length;
}
