import type { ModuleMetadata, InjectionToken, OptionalFactoryDependency } from '@nestjs/common';
import type { Cluster, ClusterNode, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { isStreamId } from '../wire/stream-id';
import type { EventrailMetrics } from '../metrics/eventrail-metrics';
import { resolveRetentionOptions, type ResolvedRetentionOptions, type RetentionOptions } from '../retention/retention.options';
import { checkBoolean, checkInteger, checkObject, checkOneOf, rejectUnknownKeys } from '../util/option-checks';
import { resolveTracingOptions, type ResolvedTracingOptions, type TracingOptions } from '../tracing/tracing.options';
import { redactUrl } from '../util/redact-url';
import { hasRedisScheme, normalizeRedisUrl } from '../redis/redis-url';

/** Where a group starts reading when it has no committed offset yet. */
export type InitialOffset = { mode: 'fromStart' } | { mode: 'fromEnd' } | { mode: 'fromId'; id: string } | { mode: 'fromTime'; time: Date };

/** Options of one consumer group. Set them module-wide under `consumer`, per group under `groups.<name>`, or in `@OnEvent`. */
export interface ConsumerOptions {
  /**
   * Handler calls in flight at once in this process for the group, across its
   * partitions. Events with the same key never run at the same time.
   * @default 1
   */
  concurrency?: number;
  /**
   * Entries read from a partition per round trip, and handled between two commits.
   * @default 200
   */
  batchSize?: number;
  /**
   * While a partition is behind (a read came back full), read its next batches with a script that packs
   * them into one reply on Redis's side: the consumer decodes a fraction of the RESP values and drains
   * a backlog about twice as fast, for about four times the Redis CPU per event while it catches up.
   * Caught-up consumers wait in `XREAD BLOCK` either way. Turn it off where Redis CPU is the scarcer resource.
   * @default true
   */
  packedBacklogReads?: boolean;
  /**
   * Lease TTL of a (group, partition). Renewed every third of it while the worker lives;
   * a crashed worker's partitions are taken over after it.
   * @default 30000
   */
  lockTtlMs?: number;
  /**
   * Membership heartbeat TTL. A worker that has not heartbeated for this long stops counting
   * in the fair share.
   * @default 30000
   */
  heartbeatTtlMs?: number;
  /**
   * On shutdown, how long to wait for running handlers before committing what is done and leaving.
   * @default 10000
   */
  shutdownTimeoutMs?: number;
  /**
   * Where a group with no committed offset starts. Applied once, when the group first reads a partition.
   * @default { mode: 'fromStart' }
   */
  initialOffset?: InitialOffset;
  /**
   * Retries of a failing handler, in place, before the message is given up.
   * Where `maxRetryAgeMs` is set without `maxRetries` next to it (in the same options object), the count
   * is unlimited and the time budget alone decides.
   * @default 5
   */
  maxRetries?: number;
  /**
   * Retry by time: a failing message is retried (with the capped backoff, the partition waiting) until it
   * has been failing for this long, then given up (`retries-exhausted`). With `maxRetries` set as well,
   * whichever limit comes first. 0 turns it off (count-based retries only, as the original eventrail).
   * @default 0
   */
  maxRetryAgeMs?: number;
  /**
   * First retry delay; doubles on every retry, with jitter.
   * @default 1000
   */
  retryBackoffMs?: number;
  /**
   * Upper bound of the retry delay.
   * @default 30000
   */
  retryBackoffMaxMs?: number;
  /**
   * Deliveries of one entry by workers that then died (a message that crashes the process) before it is
   * dead-lettered unhandled. Counted only when a worker takes over a partition whose lease expired.
   * @default 10
   */
  maxDeliveries?: number;
  /**
   * A handler that has not settled after this long counts as a failed attempt (`HandlerTimeoutError`).
   * It is not cancelled. 0 turns the timeout off.
   * @default 0
   */
  handlerTimeoutMs?: number;
  /**
   * Record every handled event id with the offset commit, and skip an event whose id is already recorded
   * (a redelivery after a crash, or the same event published twice).
   * @default false
   */
  enableIdempotency?: boolean;
  /**
   * How long an idempotency record is kept.
   * @default 86400000 (24 h)
   */
  idempotencyTtlMs?: number;
}

export type ResolvedConsumerOptions = Required<ConsumerOptions>;

/** Redis Cluster startup nodes and options, as ioredis's `Cluster` takes them. */
export interface ClusterConnection {
  cluster: { nodes: ClusterNode[]; options?: ClusterOptions };
}

/**
 * Redis behind Sentinel: the sentinels to ask, the `name` of the primary they
 * watch, and any other ioredis option for the data connections (`password`,
 * `tls`, `sentinelPassword`, `sentinelTLS`, `natMap`, `role`, ...). A `tls`
 * here also turns on TLS to the primary (ioredis's `enableTLSForSentinelMode`).
 */
export interface SentinelConnection {
  sentinel: RedisOptions & { sentinels: Array<{ host: string; port: number }>; name: string };
}

export type RedisConnection = string | RedisOptions | Redis | Cluster | ClusterConnection | SentinelConnection;

/**
 * `acknowledged`: `publish` resolves once the primary appended the event.
 * `replicated`: it also waits (`WAIT`) until `replication.replicas` replicas have it, and rejects with
 * `ReplicationTimeoutError` when they do not confirm within `replication.timeoutMs`.
 */
export type Durability = 'acknowledged' | 'replicated';

export interface EventrailModuleOptions {
  /**
   * A URL (`redis://`, `rediss://` for TLS, or Valkey's `valkey://` and `valkeys://`), ioredis options,
   * `{ cluster: { nodes, options? } }` for Redis Cluster, `{ sentinel: { sentinels, name, ... } }` for
   * Redis behind Sentinel, or an ioredis client (`Redis` or `Cluster`) the application owns (eventrail
   * never closes it).
   * @default process.env.EVENTRAIL_REDIS_URL ?? 'redis://localhost:6379'
   */
  redis?: RedisConnection;
  /**
   * Every Redis key lives under it, so several applications can share one Redis.
   * @default process.env.EVENTRAIL_PREFIX ?? 'eventrail'
   */
  prefix?: string;
  /**
   * Number of partition streams. Fixed once the log exists.
   * @default 1
   */
  partitions?: number;
  /** Defaults for every consumer group. */
  consumer?: ConsumerOptions;
  /**
   * Default durability of `publish` (each call may override it).
   * @default 'acknowledged'
   */
  durability?: Durability;
  /** What `durability: 'replicated'` waits for. */
  replication?: {
    /** Replicas that must confirm each append. @default 1 */
    replicas?: number;
    /** How long to wait for them. @default 1000 */
    timeoutMs?: number;
  };
  /** Overrides per group name. */
  groups?: Record<string, ConsumerOptions>;
  /**
   * Start the consumers when the application bootstraps. With `false`, call `EventrailConsumers.start()`.
   * @default true
   */
  autoStart?: boolean;
  /**
   * Largest accepted `data`, in bytes of its JSON.
   * @default 1048576
   */
  maxPayloadBytes?: number;
  /**
   * Producer dedup: a publish with an explicit `id` appends once per id (and partition) within this window,
   * however often it is called; later calls return the first append's offset. 0 turns dedup off.
   * @default 0
   */
  dedupWindowMs?: number;
  /**
   * How long startup waits for Redis before failing with `RedisUnavailableError`.
   * @default 10000
   */
  startupTimeoutMs?: number;
  /**
   * Start even when Redis cannot be reached: publishing rejects and consumers start once Redis answers.
   * @default false
   */
  allowDegradedStart?: boolean;
  /**
   * Refuse to start (`EvictionPolicyError`) when Redis's `maxmemory-policy` is not `noeviction`: any other
   * policy lets Redis evict the log, offsets and leases when memory runs out. Without it, startup only warns.
   * @default false
   */
  requireNoEviction?: boolean;
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
  cloudEvents?: {
    /**
     * The CloudEvents `source` (a URI-reference) of events this app's log hands out as CloudEvents.
     * @default `/eventrail/<prefix>`
     */
    source?: string;
  };
}

export interface EventrailModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  inject?: Array<InjectionToken | OptionalFactoryDependency>;
  useFactory: (...args: never[]) => EventrailModuleOptions | Promise<EventrailModuleOptions>;
  /** @default true */
  isGlobal?: boolean;
}

export interface ResolvedEventrailOptions {
  redis: RedisConnection;
  prefix: string;
  partitions: number;
  durability: Durability;
  replication: { replicas: number; timeoutMs: number };
  consumer: ResolvedConsumerOptions;
  groups: Record<string, ConsumerOptions>;
  autoStart: boolean;
  maxPayloadBytes: number;
  dedupWindowMs: number;
  startupTimeoutMs: number;
  allowDegradedStart: boolean;
  requireNoEviction: boolean;
  metrics: EventrailMetrics;
  retention?: ResolvedRetentionOptions;
  tracing: ResolvedTracingOptions;
  cloudEvents: { source: string };
}

export const DEFAULT_CONSUMER_OPTIONS: ResolvedConsumerOptions = Object.freeze({
  concurrency: 1,
  batchSize: 200,
  packedBacklogReads: true,
  lockTtlMs: 30_000,
  heartbeatTtlMs: 30_000,
  shutdownTimeoutMs: 10_000,
  initialOffset: { mode: 'fromStart' } as InitialOffset,
  maxRetries: 5,
  maxRetryAgeMs: 0,
  retryBackoffMs: 1_000,
  retryBackoffMaxMs: 30_000,
  maxDeliveries: 10,
  handlerTimeoutMs: 0,
  enableIdempotency: false,
  idempotencyTtlMs: 86_400_000,
});

/**
 * The module-wide defaults, applied by `resolveModuleOptions` (`isGlobal` by `EventrailModule`, which must
 * know it before the options are resolved) and nowhere else. `redis` and `prefix` are
 * the last fallbacks, after `EVENTRAIL_REDIS_URL` and `EVENTRAIL_PREFIX`; consumer defaults are
 * `DEFAULT_CONSUMER_OPTIONS`, retention's `RETENTION_DEFAULTS`.
 */
export const MODULE_DEFAULTS = Object.freeze({
  isGlobal: true,
  redis: 'redis://localhost:6379',
  prefix: 'eventrail',
  partitions: 1,
  durability: 'acknowledged',
  replication: Object.freeze({ replicas: 1, timeoutMs: 1_000 }),
  autoStart: true,
  maxPayloadBytes: 1024 * 1024,
  dedupWindowMs: 0,
  startupTimeoutMs: 10_000,
  allowDegradedStart: false,
  requireNoEviction: false,
} as const);

/**
 * Every key `forRoot` accepts, checked so that a misspelt option fails startup instead of being ignored.
 * Typed as a record of the interface's keys: an option added to `EventrailModuleOptions` and not here
 * fails the build rather than every startup that sets it.
 */
const MODULE_OPTION_NAMES = Object.keys({
  redis: true,
  prefix: true,
  partitions: true,
  consumer: true,
  durability: true,
  replication: true,
  groups: true,
  autoStart: true,
  maxPayloadBytes: true,
  dedupWindowMs: true,
  startupTimeoutMs: true,
  allowDegradedStart: true,
  requireNoEviction: true,
  isGlobal: true,
  metrics: true,
  retention: true,
  tracing: true,
  cloudEvents: true,
} satisfies Record<keyof EventrailModuleOptions, true>);
const REPLICATION_OPTION_NAMES = Object.keys({ replicas: true, timeoutMs: true } satisfies Record<
  keyof NonNullable<EventrailModuleOptions['replication']>,
  true
>);
const CLUSTER_OPTION_NAMES = Object.keys({ nodes: true, options: true } satisfies Record<keyof ClusterConnection['cluster'], true>);
/**
 * Every ioredis 6 connection option, for `redis.sentinel`, where a misspelt option (`sentinelPasword`)
 * would otherwise be ignored. Typed as a record of `RedisOptions`' keys, so an ioredis upgrade that adds
 * one fails the build until it is listed.
 */
const REDIS_OPTION_NAMES = Object.keys({
  ...{ host: true, port: true, path: true, family: true, tls: true, username: true, password: true, db: true },
  ...{ name: true, role: true, sentinels: true, sentinelUsername: true, sentinelPassword: true, sentinelTLS: true },
  ...{ enableTLSForSentinelMode: true, natMap: true, updateSentinels: true, sentinelMaxConnections: true, failoverDetector: true },
  ...{ sentinelRetryStrategy: true, sentinelReconnectStrategy: true, preferredSlaves: true, sentinelCommandTimeout: true },
  ...{ connectTimeout: true, disconnectTimeout: true, commandTimeout: true, socketTimeout: true, keepAlive: true, noDelay: true },
  ...{ blockingTimeout: true, blockingTimeoutGrace: true, retryStrategy: true, reconnectOnError: true, maxRetriesPerRequest: true },
  ...{ connectionName: true, disableClientInfo: true, clientInfoTag: true, readOnly: true, stringNumbers: true, protocol: true },
  ...{ replyMapping: true, monitor: true, maxLoadingRetryTime: true, enableAutoPipelining: true, autoPipeliningIgnoredCommands: true },
  ...{ offlineQueue: true, commandQueue: true, enableOfflineQueue: true, enableReadyCheck: true, lazyConnect: true, scripts: true },
  ...{
    autoResubscribe: true,
    autoResendUnfulfilledCommands: true,
    keyPrefix: true,
    Connector: true,
    himportFieldsets: true,
    showFriendlyErrorStack: true,
  },
} satisfies Record<keyof RedisOptions, true>);
const CONSUMER_OPTION_NAMES = Object.keys(DEFAULT_CONSUMER_OPTIONS) as ReadonlyArray<keyof ConsumerOptions>;
const DURABILITIES: readonly Durability[] = ['acknowledged', 'replicated'];
const PREFIX_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;
const GROUP_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;
const MAX_PARTITIONS = 1024;

/** Applies defaults and environment fallbacks once, and validates everything, naming the option that is wrong. */
export function resolveModuleOptions(options: EventrailModuleOptions = {}, env: NodeJS.ProcessEnv = process.env): ResolvedEventrailOptions {
  checkObject('options', options, 'an object');
  rejectUnknownKeys('', options, MODULE_OPTION_NAMES);
  const prefix = options.prefix ?? env.EVENTRAIL_PREFIX ?? MODULE_DEFAULTS.prefix;
  if (typeof prefix !== 'string' || !PREFIX_PATTERN.test(prefix)) {
    throw new InvalidOptionError('prefix', prefix, 'letters, digits, ".", "_", ":" or "-", 1 to 64 characters');
  }
  const redis = checkRedisConnection(options.redis ?? env.EVENTRAIL_REDIS_URL ?? MODULE_DEFAULTS.redis);
  const partitions = checkInteger('partitions', options.partitions ?? MODULE_DEFAULTS.partitions, 1, MAX_PARTITIONS);

  const consumer = resolveConsumerOptions('consumer', options.consumer, DEFAULT_CONSUMER_OPTIONS);
  const groups = options.groups ?? {};
  checkObject('groups', groups, 'an object of group name to consumer options');
  for (const [name, groupOptions] of Object.entries(groups)) {
    validateGroupName(`groups.${name}`, name);
    resolveConsumerOptions(`groups.${name}`, groupOptions, consumer);
  }
  const durability = checkOneOf('durability', options.durability ?? MODULE_DEFAULTS.durability, DURABILITIES);
  const given = options.replication ?? {};
  checkObject('replication', given, 'an object: { replicas?, timeoutMs? }');
  rejectUnknownKeys('replication', given, REPLICATION_OPTION_NAMES);
  const replication = {
    replicas: checkInteger('replication.replicas', given.replicas ?? MODULE_DEFAULTS.replication.replicas, 1, 100),
    timeoutMs: checkInteger('replication.timeoutMs', given.timeoutMs ?? MODULE_DEFAULTS.replication.timeoutMs, 1, 600_000),
  };
  const maxPayloadBytes = checkInteger('maxPayloadBytes', options.maxPayloadBytes ?? MODULE_DEFAULTS.maxPayloadBytes, 1, 512 * 1024 * 1024);
  const dedupWindowMs = checkInteger('dedupWindowMs', options.dedupWindowMs ?? MODULE_DEFAULTS.dedupWindowMs, 0, 30 * 86_400_000);
  const startupTimeoutMs = checkInteger('startupTimeoutMs', options.startupTimeoutMs ?? MODULE_DEFAULTS.startupTimeoutMs, 1, 3_600_000);

  return {
    redis,
    prefix,
    partitions,
    durability,
    replication,
    consumer,
    groups,
    autoStart: checkBoolean('autoStart', options.autoStart ?? MODULE_DEFAULTS.autoStart),
    maxPayloadBytes,
    dedupWindowMs,
    startupTimeoutMs,
    allowDegradedStart: checkBoolean('allowDegradedStart', options.allowDegradedStart ?? MODULE_DEFAULTS.allowDegradedStart),
    requireNoEviction: checkBoolean('requireNoEviction', options.requireNoEviction ?? MODULE_DEFAULTS.requireNoEviction),
    metrics: validateMetrics(options.metrics ?? {}),
    retention: resolveRetentionOptions(options.retention, env),
    tracing: resolveTracingOptions(options.tracing),
    cloudEvents: resolveCloudEventsOptions(options.cloudEvents, prefix),
  };
}

function checkRedisConnection(redis: unknown): RedisConnection {
  if (typeof redis === 'string') {
    // The URL goes into an error, and errors go into logs.
    if (!hasRedisScheme(redis))
      throw new InvalidOptionError('redis', redactUrl(redis), 'a URL starting with redis://, rediss://, valkey:// or valkeys://');
    return normalizeRedisUrl(redis);
  }
  checkObject(
    'redis',
    redis,
    'a redis:// URL, ioredis options, { cluster: { nodes } }, { sentinel: { sentinels, name } } or an ioredis client',
  );
  if (isSentinelConnection(redis)) {
    checkSentinelOptions(redis.sentinel);
    return redis;
  }
  // Clients have a cluster() command method: only a plain object with a `cluster` object is a cluster config.
  if (isClusterConnection(redis)) {
    rejectUnknownKeys('redis.cluster', redis.cluster, CLUSTER_OPTION_NAMES);
    const nodes = redis.cluster?.nodes;
    if (!Array.isArray(nodes) || nodes.length === 0) {
      throw new InvalidOptionError('redis.cluster.nodes', nodes, 'a non-empty array of startup nodes ({ host, port } or "host:port")');
    }
  }
  return redis as RedisConnection;
}

/** Merges `overrides` over `base` and validates the result; `path` names the options in errors. */
export function resolveConsumerOptions(
  path: string,
  overrides: ConsumerOptions | undefined,
  base: ResolvedConsumerOptions,
): ResolvedConsumerOptions {
  if (overrides === undefined) return base;
  checkObject(path, overrides, 'an object of consumer options');
  // `group` is allowed but not offered: it names the group in `@OnEvent` options, next to these.
  rejectUnknownKeys(path, overrides, CONSUMER_OPTION_NAMES, ['group']);
  const merged: ResolvedConsumerOptions = { ...base };
  for (const key of CONSUMER_OPTION_NAMES) {
    const value = overrides[key];
    if (value !== undefined) (merged as unknown as Record<string, unknown>)[key] = value;
  }
  // A time budget given without a count: the count no longer limits (see `maxRetries`).
  if (overrides.maxRetryAgeMs !== undefined && overrides.maxRetries === undefined && overrides.maxRetryAgeMs !== 0) {
    merged.maxRetries = Number.POSITIVE_INFINITY;
  }
  checkInteger(`${path}.concurrency`, merged.concurrency, 1, 10_000);
  checkInteger(`${path}.batchSize`, merged.batchSize, 1, 10_000);
  checkBoolean(`${path}.packedBacklogReads`, merged.packedBacklogReads);
  checkInteger(`${path}.lockTtlMs`, merged.lockTtlMs, 300, 3_600_000);
  checkInteger(`${path}.heartbeatTtlMs`, merged.heartbeatTtlMs, 300, 3_600_000);
  checkInteger(`${path}.shutdownTimeoutMs`, merged.shutdownTimeoutMs, 0, 3_600_000);
  // Unlimited only by the rule above (or inherited from it); a count given is an integer.
  if (overrides.maxRetries !== undefined || merged.maxRetries !== Number.POSITIVE_INFINITY) {
    checkInteger(`${path}.maxRetries`, merged.maxRetries, 0, 1_000);
  }
  checkInteger(`${path}.maxRetryAgeMs`, merged.maxRetryAgeMs, 0, 30 * 86_400_000);
  checkInteger(`${path}.retryBackoffMs`, merged.retryBackoffMs, 0, 3_600_000);
  checkInteger(`${path}.retryBackoffMaxMs`, merged.retryBackoffMaxMs, 0, 86_400_000);
  checkInteger(`${path}.maxDeliveries`, merged.maxDeliveries, 1, 1_000);
  checkInteger(`${path}.handlerTimeoutMs`, merged.handlerTimeoutMs, 0, 86_400_000);
  checkBoolean(`${path}.enableIdempotency`, merged.enableIdempotency);
  checkInteger(`${path}.idempotencyTtlMs`, merged.idempotencyTtlMs, 1_000, 365 * 86_400_000);
  validateInitialOffset(`${path}.initialOffset`, merged.initialOffset);
  return merged;
}

export function validateGroupName(path: string, name: unknown): asserts name is string {
  if (typeof name !== 'string' || !GROUP_PATTERN.test(name)) {
    throw new InvalidOptionError(path, name, 'a group name of letters, digits, ".", "_" or "-", 1 to 100 characters');
  }
}

function validateInitialOffset(path: string, offset: InitialOffset): void {
  const modes = "{ mode: 'fromStart' | 'fromEnd' } | { mode: 'fromId', id: '<ms>-<seq>' } | { mode: 'fromTime', time: Date }";
  checkObject(path, offset, modes);
  switch (offset.mode) {
    case 'fromStart':
    case 'fromEnd':
      return;
    case 'fromId':
      if (typeof offset.id !== 'string' || !isStreamId(offset.id)) {
        throw new InvalidOptionError(`${path}.id`, offset.id, 'a stream id such as "1700000000000-0"');
      }
      return;
    case 'fromTime':
      if (!(offset.time instanceof Date) || Number.isNaN(offset.time.getTime()) || offset.time.getTime() < 0) {
        throw new InvalidOptionError(`${path}.time`, offset.time, 'a valid Date');
      }
      return;
    default:
      throw new InvalidOptionError(`${path}.mode`, (offset as { mode: unknown }).mode, modes);
  }
}

/** A plain object with a `sentinel` object (a client's `sentinel` is a command method, a function). */
export function isSentinelConnection(value: unknown): value is SentinelConnection {
  const sentinel = (value as { sentinel?: unknown } | null)?.sentinel;
  return typeof value === 'object' && value !== null && typeof sentinel === 'object' && sentinel !== null;
}

function checkSentinelOptions(sentinel: SentinelConnection['sentinel']): void {
  rejectUnknownKeys('redis.sentinel', sentinel, REDIS_OPTION_NAMES);
  const { sentinels, name } = sentinel;
  if (!Array.isArray(sentinels) || sentinels.length === 0) {
    throw new InvalidOptionError('redis.sentinel.sentinels', sentinels, 'a non-empty array of { host, port }');
  }
  sentinels.forEach((address: unknown, i) => {
    const { host, port } = (address ?? {}) as { host?: unknown; port?: unknown };
    if (typeof host !== 'string' || host === '')
      throw new InvalidOptionError(`redis.sentinel.sentinels[${i}].host`, host, 'a host name or address');
    checkInteger(`redis.sentinel.sentinels[${i}].port`, port, 1, 65_535, 'a port from 1 to 65535');
  });
  if (typeof name !== 'string' || name === '') {
    throw new InvalidOptionError('redis.sentinel.name', name, 'the name of the primary the sentinels watch (sentinel monitor <name> ...)');
  }
}

export function isClusterConnection(value: unknown): value is ClusterConnection {
  const cluster = (value as { cluster?: unknown } | null)?.cluster;
  return typeof value === 'object' && value !== null && typeof cluster === 'object' && cluster !== null;
}

function validateMetrics(metrics: EventrailMetrics): EventrailMetrics {
  checkObject('metrics', metrics, 'an object of hook functions');
  for (const [name, hook] of Object.entries(metrics)) {
    if (hook !== undefined && typeof hook !== 'function') throw new InvalidOptionError(`metrics.${name}`, hook, 'a function');
  }
  return metrics;
}

/** Defaults of `batch` in `@OnEvent` options (see `BatchOptions`). */
export const DEFAULT_BATCH_OPTIONS = Object.freeze({ maxSize: 100, maxWaitMs: 0 });
const BATCH_OPTION_NAMES = Object.keys(DEFAULT_BATCH_OPTIONS);

/** Validates `batch` of an `@OnEvent` and applies its defaults; `path` names it in errors. */
export function resolveBatchOptions(path: string, batch: unknown): { maxSize: number; maxWaitMs: number } {
  checkObject(path, batch, 'an object: { maxSize?, maxWaitMs? }');
  rejectUnknownKeys(path, batch, BATCH_OPTION_NAMES);
  const given = batch as { maxSize?: unknown; maxWaitMs?: unknown };
  return {
    maxSize: checkInteger(`${path}.maxSize`, given.maxSize ?? DEFAULT_BATCH_OPTIONS.maxSize, 1, 10_000),
    maxWaitMs: checkInteger(`${path}.maxWaitMs`, given.maxWaitMs ?? DEFAULT_BATCH_OPTIONS.maxWaitMs, 0, 60_000),
  };
}

function resolveCloudEventsOptions(options: EventrailModuleOptions['cloudEvents'], prefix: string): { source: string } {
  const given = options ?? {};
  checkObject('cloudEvents', given, 'an object: { source? }');
  rejectUnknownKeys('cloudEvents', given, ['source']);
  const source = given.source ?? `/eventrail/${prefix}`;
  // A URI-reference: no spaces or control characters, not empty.
  // eslint-disable-next-line no-control-regex
  if (typeof source !== 'string' || !/^[^\s\u0000-\u001f\u007f]{1,2048}$/.test(source)) {
    throw new InvalidOptionError(
      'cloudEvents.source',
      source,
      'a non-empty URI-reference such as "https://shop.example/orders" or "/orders"',
    );
  }
  return { source };
}
