import { Gauge, register as defaultRegistry, type Registry } from 'prom-client';
import type { EventrailAdmin } from '../admin/eventrail-admin';
import type { GroupLag } from './group-lag';
import { GroupLagReader } from './group-lag.reader';
import { type LagMetricsOptions, resolveLagMetricsOptions } from './lag-metrics.options';
import { LagSampler } from './lag-sampler';

/** The gauges, by name without the prefix: help text and the value each takes from a group's lag. */
const GAUGES: ReadonlyArray<[name: string, help: string, value: (lag: GroupLag) => number]> = [
  ['group_lag', "Entries after the group's committed offsets, all partitions, read from Redis", (l) => l.lag],
  ['group_backlog', 'Lag plus parked messages: everything the group still has to handle, the value to scale on', (l) => l.backlog],
  ['group_parked', 'Messages held back by a failing key, still to be handled, read from Redis', (l) => l.parked],
  ['group_members', 'Live workers of the group, read from Redis', (l) => l.members],
  ['group_useful_workers', 'Partitions with work: the most workers the group can keep busy now', (l) => l.usefulWorkers],
  ['group_partitions', 'Partitions of the log: the most workers any group can use', (l) => l.partitions],
  ['group_dead_letters', 'Dead letters waiting in the group, read from Redis', (l) => l.deadLetters],
];

/** What `registerLagMetrics` returns: stop its schedule (when it has one) at shutdown. */
export interface LagMetrics {
  stop(): void;
}

/**
 * Registers gauges per group (`eventrail_group_lag{group}`, `_backlog`, `_parked`,
 * `_members`, `_useful_workers`, `_partitions`, `_dead_letters`) read from
 * Redis through `admin`, so they exist with no worker of the group running.
 * The series carry only the `group` label: every process that exports them
 * exports the same series with the same values. A second call on the same
 * registry and prefix reuses the gauges, so a registry never holds a group
 * twice.
 */
export function registerLagMetrics(admin: EventrailAdmin, options: LagMetricsOptions = {}): LagMetrics {
  const resolved = resolveLagMetricsOptions(options);
  const registry: Registry = resolved.registry ?? defaultRegistry;
  const sampler = new LagSampler(new GroupLagReader(admin), resolved.groups, resolved.refreshMs);
  let created = 0;
  for (const [name, help, value] of GAUGES) {
    const full = resolved.prefix + name;
    if (registry.getSingleMetric(full)) continue;
    created++;
    new Gauge({
      name: full,
      help,
      labelNames: ['group'],
      registers: [registry],
      async collect() {
        const lags = await sampler.sample();
        this.reset(); // a pruned group, or one no longer listed, disappears
        for (const lag of lags) this.set({ group: lag.group }, value(lag));
      },
    });
  }
  // Gauges all reused: the first registration's sampler feeds them, and this one must not read Redis for nothing.
  if (created > 0) sampler.start();
  return { stop: () => sampler.stop() };
}
