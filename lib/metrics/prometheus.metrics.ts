import { Counter, Gauge, Histogram, register as defaultRegistry, Registry } from 'prom-client';
import type { EventrailMetrics } from './eventrail-metrics';

export interface PrometheusMetricsOptions {
  /** Registry to register the metrics in. @default prom-client's global registry */
  registry?: Registry;
  /** Prefix of every metric name. @default 'eventrail_' */
  prefix?: string;
  /** Buckets of the handler duration histogram, in seconds. */
  buckets?: number[];
}

/**
 * Metrics hooks that feed `prom-client` (an optional peer dependency):
 * counters and a duration histogram labelled by group and event, a lag gauge
 * per group and partition, and lease changes. Pass the result as the module's
 * `metrics` option and expose the registry (for example on `/metrics`).
 */
export function createPrometheusMetrics(options: PrometheusMetricsOptions = {}): EventrailMetrics {
  const registry = options.registry ?? defaultRegistry;
  const prefix = options.prefix ?? 'eventrail_';
  // A second call with the same registry reuses the metrics instead of failing to register them twice.
  const reuse = <T>(name: string, create: (config: { name: string; registers: Registry[] }) => T): T =>
    (registry.getSingleMetric(prefix + name) as T | undefined) ?? create({ name: prefix + name, registers: [registry] });
  const counter = (name: string, help: string, labelNames: string[]): Counter =>
    reuse(name, (config) => new Counter({ ...config, help, labelNames }));

  const processed = counter('messages_processed_total', 'Messages whose handlers all succeeded', ['group', 'event']);
  const errors = counter('handler_errors_total', 'Failed handler attempts (retried or not)', ['group', 'event']);
  const deadLettered = counter('messages_dead_lettered_total', 'Messages written to the dead-letter stream', ['group', 'event']);
  const skipped = counter('messages_skipped_total', 'Entries passed over without a handler call', ['group', 'reason']);
  const leases = counter('lease_changes_total', 'Partition leases taken, lost and handed back by this process', ['group', 'change']);
  const logLost = counter(
    'log_lost_total',
    'Times this process found that Redis came back without the log (restart without persistence)',
    [],
  );
  const duration = reuse(
    'handler_duration_seconds',
    (config) =>
      new Histogram({
        ...config,
        help: 'Time from the first attempt of a message to the success of its handlers',
        labelNames: ['group', 'event'],
        buckets: options.buckets ?? [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30],
      }),
  );
  const lag = reuse(
    'lag',
    (config) =>
      new Gauge({ ...config, help: 'Entries after the committed offset (sampled every heartbeat)', labelNames: ['group', 'partition'] }),
  );

  const outboxRelayed = counter('outbox_relayed_total', 'Outbox rows the relay of this process appended to the log', ['table']);
  const outboxDuplicates = counter('outbox_duplicates_total', 'Of those, appends producer dedup found already done', ['table']);
  const outboxGauge = (name: string, help: string): Gauge => reuse(name, (config) => new Gauge({ ...config, help, labelNames: ['table'] }));
  const outboxDepth = outboxGauge('outbox_depth', 'Outbox rows waiting for the relay (sampled by the active relay)');
  const outboxAge = outboxGauge(
    'outbox_oldest_age_seconds',
    'Age of the oldest waiting outbox row, 0 when none (sampled by the active relay)',
  );

  return {
    onOutboxRelayed: (table, relayed, duplicates) => {
      outboxRelayed.inc({ table }, relayed);
      outboxDuplicates.inc({ table }, duplicates);
    },
    onOutboxStatus: (table, depth, oldestAgeMs) => {
      outboxDepth.set({ table }, depth);
      outboxAge.set({ table }, oldestAgeMs / 1000);
    },
    onMessageProcessed: (group, event, durationMs) => {
      processed.inc({ group, event });
      duration.observe({ group, event }, durationMs / 1000);
    },
    onHandlerError: (group, event) => errors.inc({ group, event }),
    onMessageDeadLettered: (group, event) => deadLettered.inc({ group, event }),
    onMessageSkipped: (group, reason) => skipped.inc({ group, reason }),
    onLag: (group, partition, value) => lag.set({ group, partition: String(partition) }, value),
    onLogLost: () => logLost.inc(),
    onLeaseAcquired: (group) => leases.inc({ group, change: 'acquired' }),
    // A partition this process no longer works has no lag of its own here: its last sample would go stale.
    onLeaseLost: (group, partition) => {
      leases.inc({ group, change: 'lost' });
      lag.remove({ group, partition: String(partition) });
    },
    onLeaseReleased: (group, partition) => {
      leases.inc({ group, change: 'released' });
      lag.remove({ group, partition: String(partition) });
    },
  };
}
