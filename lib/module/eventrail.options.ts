import type { ModuleMetadata, InjectionToken, OptionalFactoryDependency } from '@nestjs/common';
import { LOG_OPTION_NAMES, resolveLogOptions, type LogOptions, type ResolvedLogOptions } from '../config/log.options';
import {
  resolveCloudEventsSourceOptions,
  type CloudEventsSourceOptions,
  type ResolvedCloudEventsSourceOptions,
} from '../cloudevents/cloud-events-source.options';
import {
  CONSUMERS_OPTION_NAMES,
  resolveConsumersOptions,
  type ConsumersOptions,
  type ResolvedConsumersOptions,
} from '../consumer/consumer.options';
import { resolveMetricsOption, type EventrailMetrics } from '../metrics/eventrail-metrics';
import {
  PUBLISHER_OPTION_NAMES,
  resolvePublisherOptions,
  type PublisherOptions,
  type ResolvedPublisherOptions,
} from '../publisher/publisher.options';
import {
  CONNECTION_OPTION_NAMES,
  resolveRedisConnection,
  resolveStartupOptions,
  type ConnectionOptions,
  type ResolvedConnectionOptions,
} from '../redis/connection.options';
import { resolveRetentionOptions, type ResolvedRetentionOptions, type RetentionOptions } from '../retention/retention.options';
import { resolveTracingOptions, type ResolvedTracingOptions, type TracingOptions } from '../tracing/tracing.options';
import { checkObject, optionNames, rejectUnknownKeys } from '../config/option-checks';

/**
 * `forRoot`'s options: each feature's part (the log, the connection, publishing, the consumers), and the
 * options of the features that sit on the log as one key each. Each part documents its own options.
 */
export interface EventrailModuleOptions extends LogOptions, ConnectionOptions, PublisherOptions, ConsumersOptions {
  /**
   * Register the module globally, so `EventrailPublisher` is injectable everywhere.
   * @default true
   */
  isGlobal?: boolean;
  /** Hooks called as messages are processed, for metrics (see `createPrometheusMetrics` in `nestjs-eventrail/prometheus`). */
  metrics?: EventrailMetrics;
  /**
   * Scheduled trimming of the log, with optional archival (see `RetentionOptions`). Needs `@nestjs/schedule`
   * and `ScheduleModule.forRoot()` in the app when enabled. Pass `retentionOptionsFromEnv()` to read the
   * original eventrail's `RETENTION_*` variables.
   * @default undefined (no retention: the log grows until trimmed)
   */
  retention?: RetentionOptions;
  /**
   * OpenTelemetry spans for publishing and handling, when `@opentelemetry/api` is installed (see `TracingOptions`).
   * @default { enabled: true, parent: false }
   */
  tracing?: TracingOptions;
  /** CloudEvents: what `EventrailCloudEvents.toCloudEvent` writes as `source`. */
  cloudEvents?: CloudEventsSourceOptions;
}

export interface EventrailModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  inject?: Array<InjectionToken | OptionalFactoryDependency>;
  useFactory: (...args: never[]) => EventrailModuleOptions | Promise<EventrailModuleOptions>;
  /** @default true */
  isGlobal?: boolean;
}

/**
 * Every part resolved. Each feature injects `EVENTRAIL_OPTIONS` typed as the view it reads (such as
 * `PublisherView`), and this type, the intersection of the parts, is assignable to each of them.
 */
export type ResolvedEventrailOptions = ResolvedLogOptions &
  ResolvedConnectionOptions &
  ResolvedPublisherOptions &
  ResolvedConsumersOptions & {
    metrics: EventrailMetrics;
    retention?: ResolvedRetentionOptions;
    tracing: ResolvedTracingOptions;
    cloudEvents: ResolvedCloudEventsSourceOptions;
  };

/** The module's own options, besides those of its parts. */
type ModuleOwnOptions = Omit<
  EventrailModuleOptions,
  keyof LogOptions | keyof ConnectionOptions | keyof PublisherOptions | keyof ConsumersOptions
>;

const [redis, ...startup] = CONNECTION_OPTION_NAMES;

/**
 * Every key `forRoot` accepts, checked so that a misspelt option fails startup instead of being ignored:
 * the parts' lists (`redis` first, the option most often set) and the module's own keys, which the build
 * holds to `ModuleOwnOptions`.
 */
export const MODULE_OPTION_NAMES = [
  redis,
  ...LOG_OPTION_NAMES,
  ...CONSUMERS_OPTION_NAMES,
  ...startup,
  ...PUBLISHER_OPTION_NAMES,
  ...optionNames<ModuleOwnOptions>()(['isGlobal', 'metrics', 'retention', 'tracing', 'cloudEvents']),
] as const;

/**
 * The module's own default, applied by `EventrailModule`, which must know it before the options are
 * resolved. Each part's defaults are its own (`LOG_DEFAULTS`, `CONNECTION_DEFAULTS`, `PUBLISHER_DEFAULTS`,
 * `DEFAULT_CONSUMER_OPTIONS`, `RETENTION_DEFAULTS`, `TRACING_DEFAULTS`), applied by its resolver.
 */
export const MODULE_DEFAULTS = Object.freeze({ isGlobal: true } as const);

/** Applies defaults and environment fallbacks once, and validates everything, naming the option that is wrong. */
export function resolveModuleOptions(options: EventrailModuleOptions = {}, env: NodeJS.ProcessEnv = process.env): ResolvedEventrailOptions {
  checkObject('options', options, 'an object');
  rejectUnknownKeys('', options, MODULE_OPTION_NAMES);
  const log = resolveLogOptions(options, env);
  const redis = resolveRedisConnection(options.redis, env);
  const consumers = resolveConsumersOptions(options);
  const startup = resolveStartupOptions(options);
  const publisher = resolvePublisherOptions(options);
  return {
    redis,
    ...log,
    ...startup,
    ...consumers,
    ...publisher,
    metrics: resolveMetricsOption(options.metrics),
    retention: resolveRetentionOptions(options.retention, env),
    tracing: resolveTracingOptions(options.tracing),
    cloudEvents: resolveCloudEventsSourceOptions(options.cloudEvents, log),
  };
}
