import { Injectable } from '@nestjs/common';
import type Redis from 'ioredis';
import { EventrailAdmin, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createEventrailApp, startConsumers } from '../support/eventrail-app';
import { BENCH_EVENT, PAYLOAD } from '../support/payload';
import { commandCount } from '../support/redis-tools';
import { Measurement, RunContext, Scenario, Size } from '../support/scenario';

const PARTITIONS = 16;
const GROUPS = ['lag-mailer', 'lag-ledger', 'lag-audit'];
/** Entries each (group, partition) is behind. */
const DEPTH = { quick: 20_000, full: 1_000_000 };
/** Overview reads timed per state (the median is reported). */
const READS = { quick: 3, full: 9 };
/** Appends per script call of the fill: about 0.1 s of Redis each. */
const FILL_CHUNK = 100_000;
/**
 * The fill appends inside Redis (a Lua loop of XADD), so 16 million entries
 * take seconds rather than minutes. The entries are small (`{}` as data): an
 * O(1) lag read never looks at them; the counted fallback would read slower
 * with real payloads, so its figure here is a best case.
 */
const FILL_LUA = `for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '*', 'event', ARGV[2], 'data', '{}') end return 1`;

@Injectable()
class LagGroups {
  @OnEvent(BENCH_EVENT, GROUPS[0])
  mailer(): void {}

  @OnEvent(BENCH_EVENT, GROUPS[1])
  ledger(): void {}

  @OnEvent(BENCH_EVENT, GROUPS[2])
  audit(): void {}
}

/**
 * Lag cost: the admin overview (what every dashboard refresh reads) of 16
 * partitions × 3 groups, once caught up and once each (group, partition)
 * 1 000 000 entries behind. With positions the lag is exact and the overview
 * sends the same requests either way; Redis runs one more command inside the
 * lag script per (group, partition) when there is lag (the HGET of the
 * position). For comparison, the same backlog with the positions removed,
 * which makes the overview count as before positions existed (capped at
 * 10 000 per side).
 */
export function lagCost(size: Size): Scenario {
  const depth = DEPTH[size];
  return {
    id: 'lag-cost',
    title: `Admin overview, ${PARTITIONS} partitions × ${GROUPS.length} groups, caught up and ${depth.toLocaleString('en-US')} entries behind each`,
    metrics: [
      { key: 'caughtUpMs', unit: 'ms per overview, caught up', digits: 1 },
      { key: 'behindMs', unit: 'ms per overview, behind', digits: 1 },
      { key: 'countedMs', unit: 'ms per overview, behind, counted (no positions)', digits: 0 },
      { key: 'caughtUpRequests', unit: 'requests per overview, caught up', digits: 0 },
      { key: 'behindRequests', unit: 'requests per overview, behind', digits: 0 },
      { key: 'countedRequests', unit: 'requests per overview, counted', digits: 0 },
      { key: 'caughtUpCommands', unit: 'Redis commands per overview (scripts included), caught up', digits: 0 },
      { key: 'behindCommands', unit: 'Redis commands per overview (scripts included), behind', digits: 0 },
      { key: 'requestRatio', unit: 'requests behind / caught up', digits: 2 },
      { key: 'exact', unit: '1 when the lag is exact', digits: 0 },
    ],
    rounds: size === 'quick' ? 1 : 2,
    warmup: false,
    variants: [
      {
        id: 'overview',
        label: `eventrail admin overview, ${PARTITIONS} × ${GROUPS.length}`,
        events: PARTITIONS * depth,
        run: (ctx) => measure(ctx, depth, READS[size]),
      },
    ],
    targets: [
      {
        label: `lag overview ${PARTITIONS}×${GROUPS.length}, ${depth} behind each: exact`,
        variant: 'overview',
        metric: 'exact',
        atLeast: 1,
      },
      { label: 'lag overview: requests behind / caught up', variant: 'overview', metric: 'requestRatio', atMost: 1 },
      { label: 'lag overview behind (ms)', variant: 'overview', metric: 'behindMs' },
      { label: 'lag overview caught up (ms)', variant: 'overview', metric: 'caughtUpMs' },
      { label: 'lag overview behind, counted without positions (ms)', variant: 'overview', metric: 'countedMs' },
    ],
  };
}

async function measure(ctx: RunContext, depth: number, reads: number): Promise<Measurement> {
  const keys = new EventrailKeys(ctx.prefix, PARTITIONS);
  await catchUp(ctx, keys);
  const app = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix, partitions: PARTITIONS });
  try {
    const admin = app.get(EventrailAdmin);
    const caughtUp = await readCost(ctx.admin, admin, reads);
    for (let p = 0; p < PARTITIONS; p++) {
      for (let added = 0; added < depth; added += FILL_CHUNK) {
        await ctx.admin.eval(FILL_LUA, 1, keys.stream(p), Math.min(FILL_CHUNK, depth - added), BENCH_EVENT);
      }
    }
    const behind = await readCost(ctx.admin, admin, reads);
    const exact = behind.lag === PARTITIONS * GROUPS.length * depth && !behind.capped;
    // Without positions (as an older eventrail left them): counted, one read is enough.
    for (const group of GROUPS) for (let p = 0; p < PARTITIONS; p++) await ctx.admin.hdel(keys.recovery(group, p), 'position');
    const counted = await readCost(ctx.admin, admin, 1);
    return {
      metrics: {
        caughtUpMs: caughtUp.ms,
        behindMs: behind.ms,
        countedMs: counted.ms,
        caughtUpRequests: caughtUp.requests,
        behindRequests: behind.requests,
        countedRequests: counted.requests,
        caughtUpCommands: caughtUp.commands,
        behindCommands: behind.commands,
        requestRatio: behind.requests / caughtUp.requests,
        exact: exact ? 1 : 0,
      },
      expected: 1,
      done: exact && caughtUp.lag === 0 ? 1 : 0,
    };
  } finally {
    await app.close();
  }
}

/** The three groups consume a few events in every partition, so each commits (with its position) the last entry. */
async function catchUp(ctx: RunContext, keys: EventrailKeys): Promise<void> {
  const app = await createEventrailApp({ url: ctx.url, prefix: ctx.prefix, partitions: PARTITIONS, providers: [LagGroups] });
  try {
    await startConsumers(app);
    const published = await app
      .get(EventrailPublisher)
      .publishMany(Array.from({ length: PARTITIONS * 2 }, (_, i) => ({ event: BENCH_EVENT, data: PAYLOAD, partition: i % PARTITIONS })));
    const last = published.slice(-PARTITIONS).map((p) => p.offset);
    const offsetKeys = GROUPS.flatMap((g) => Array.from({ length: PARTITIONS }, (_, p) => keys.offset(g, p)));
    const deadline = Date.now() + 60_000;
    for (;;) {
      const offsets = await ctx.admin.mget(...offsetKeys);
      if (offsets.every((offset, i) => offset === last[i % PARTITIONS])) return;
      if (Date.now() > deadline) throw new Error(`lag-cost: groups did not catch up: ${JSON.stringify(offsets)}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  } finally {
    await app.close();
  }
}

interface ReadCost {
  /** Median time of one overview. */
  ms: number;
  /** Requests clients sent for one overview (MONITOR, without script internals). */
  requests: number;
  /** Commands Redis ran for one overview (INFO commandstats: script internals included). */
  commands: number;
  lag: number;
  capped: boolean;
}

async function readCost(redis: Redis, admin: EventrailAdmin, reads: number): Promise<ReadCost> {
  const times: number[] = [];
  for (let i = 0; i < reads; i++) {
    const started = performance.now();
    await admin.overview();
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);

  // Counted apart from the timing: MONITOR slows Redis down. monitor() opens a connection of its own
  // (a duplicate() before it was a client left connected, which kept reconnecting after its server stopped).
  const monitor = await redis.monitor();
  let requests = 0;
  let counting = true;
  const marker = `lag-cost-marker-${Math.random()}`;
  const ended = new Promise<void>((resolve) =>
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (args.includes(marker)) {
        counting = false;
        resolve();
      } else if (counting && source !== 'lua' && args[0]?.toLowerCase() !== 'info') requests++;
    }),
  );
  const before = await commandCount(redis);
  const overview = await admin.overview();
  const commands = (await commandCount(redis)) - before;
  await redis.echo(marker);
  await ended;
  monitor.disconnect();
  const partitions = overview.groups.flatMap((g) => g.partitions);
  return {
    ms: times[Math.floor(times.length / 2)],
    requests,
    commands,
    lag: overview.groups.reduce((sum, g) => sum + g.lag, 0),
    capped: partitions.some((p) => p.lagCapped),
  };
}
