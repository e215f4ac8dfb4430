import { Gauge, register as defaultRegistry, type Registry } from 'prom-client';
import type { EventrailAdmin } from '../admin/eventrail-admin';
import type { GroupLag } from './group-lag';
import { GroupLagReader } from './group-lag.reader';
import { LagMetricsClashError } from './lag-metrics-clash.error';
import { type LagMetricsOptions, type ResolvedLagMetricsOptions, resolveLagMetricsOptions } from './lag-metrics.options';
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
  ['parked_messages', 'Messages parked behind failing heads (ordering key or unordered), not done yet, read from Redis', (l) => l.parked],
  [
    'parked_oldest_age_seconds',
    'How long the parked head failing longest has been failing (Redis clock), 0 when none is, read from Redis',
    (l) => l.parkedOldestAgeMs / 1000,
  ],
];

/** What `registerLagMetrics` returns: stop at shutdown (its schedule, and its gauges once no registration is left). */
export interface LagMetrics {
  stop(): void;
}

interface Registration {
  sampler: LagSampler;
  options: ResolvedLagMetricsOptions;
}

/** The gauges of one registry and prefix, and the live registrations behind them; the newest one feeds them. */
interface SharedGauges {
  names: string[];
  registrations: Registration[];
}

const shared = new WeakMap<Registry, Map<string, SharedGauges>>();

/**
 * Registers gauges per group (`eventrail_group_lag{group}`, `_backlog`, `_parked`,
 * `_members`, `_useful_workers`, `_partitions`, `_dead_letters`, and
 * `eventrail_parked_messages{group}`, `eventrail_parked_oldest_age_seconds{group}`) read from
 * Redis through `admin`, so they exist with no worker of the group running.
 * The series carry only the `group` label: every process that exports them
 * exports the same series with the same values.
 *
 * A second registration on the same registry and prefix shares the gauges
 * when it asks for the same groups, `refreshMs` and `timeoutMs`, and is
 * refused with `LagMetricsClashError` otherwise. The newest live registration
 * feeds them (an app closed and started again in one process reads through
 * the new app's connection); `stop` of the last one removes them from the
 * registry.
 */
export function registerLagMetrics(admin: EventrailAdmin, options: LagMetricsOptions = {}): LagMetrics {
  const resolved = resolveLagMetricsOptions(options);
  const registry: Registry = resolved.registry ?? defaultRegistry;
  const byPrefix = shared.get(registry) ?? new Map<string, SharedGauges>();
  shared.set(registry, byPrefix);
  let gauges = byPrefix.get(resolved.prefix);
  if (gauges) assertSameSettings(gauges.registrations[0].options, resolved);
  else {
    gauges = createGauges(registry, resolved.prefix);
    byPrefix.set(resolved.prefix, gauges);
  }
  const registration: Registration = {
    sampler: new LagSampler(new GroupLagReader(admin), resolved.groups, resolved.refreshMs, resolved.timeoutMs),
    options: resolved,
  };
  // Only the feeding registration reads on a schedule: the others must not read Redis for nothing.
  gauges.registrations.at(-1)?.sampler.stop();
  gauges.registrations.push(registration);
  registration.sampler.start();
  const current = gauges;
  return {
    stop: () => {
      const at = current.registrations.indexOf(registration);
      if (at === -1) return;
      registration.sampler.stop();
      current.registrations.splice(at, 1);
      current.registrations.at(-1)?.sampler.start();
      if (current.registrations.length > 0) return;
      for (const name of current.names) registry.removeSingleMetric(name);
      byPrefix.delete(resolved.prefix);
    },
  };
}

function createGauges(registry: Registry, prefix: string): SharedGauges {
  const gauges: SharedGauges = { names: [], registrations: [] };
  for (const [name, help, value] of GAUGES) {
    const full = prefix + name;
    gauges.names.push(full);
    new Gauge({
      name: full,
      help,
      labelNames: ['group'],
      registers: [registry],
      async collect() {
        const feeding = gauges.registrations.at(-1);
        const lags = feeding ? await feeding.sampler.sample() : [];
        this.reset(); // a pruned group, or one no longer listed, disappears
        for (const lag of lags) this.set({ group: lag.group }, value(lag));
      },
    });
  }
  return gauges;
}

function assertSameSettings(registered: ResolvedLagMetricsOptions, requested: ResolvedLagMetricsOptions): void {
  const groups = (options: ResolvedLagMetricsOptions): string[] | 'every group' =>
    options.groups ? [...options.groups].sort() : 'every group';
  if (JSON.stringify(groups(registered)) !== JSON.stringify(groups(requested)))
    throw new LagMetricsClashError(registered.prefix, 'groups', groups(registered), groups(requested));
  for (const setting of ['refreshMs', 'timeoutMs'] as const) {
    if (registered[setting] !== requested[setting])
      throw new LagMetricsClashError(registered.prefix, setting, registered[setting], requested[setting]);
  }
}
