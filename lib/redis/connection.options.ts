import type { Cluster, ClusterNode, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import type { ResolvedLogOptions } from '../config/log.options';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { checkBoolean, checkInteger, checkObject, checkOneOf, optionNames, rejectUnknownKeys } from '../config/option-checks';
import { redactUrl } from '../util/redact-url';
import { hasRedisScheme, normalizeRedisUrl } from './redis-url';

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

/** What `durability: 'replicated'` waits for. */
export interface ReplicationOptions {
  /** Replicas that must confirm each append. @default 1 */
  replicas?: number;
  /** How long to wait for them. @default 1000 */
  timeoutMs?: number;
}

/** The module options about the Redis connection: where it is, how startup waits for it, what a write waits for. */
export interface ConnectionOptions {
  /**
   * A URL (`redis://`, `rediss://` for TLS, or Valkey's `valkey://` and `valkeys://`), ioredis options,
   * `{ cluster: { nodes, options? } }` for Redis Cluster, `{ sentinel: { sentinels, name, ... } }` for
   * Redis behind Sentinel, or an ioredis client (`Redis` or `Cluster`) the application owns (eventrail
   * never closes it).
   * @default process.env.EVENTRAIL_REDIS_URL ?? 'redis://localhost:6379'
   */
  redis?: RedisConnection;
  /**
   * Default durability of `publish` (each call may override it).
   * @default 'acknowledged'
   */
  durability?: Durability;
  /** What `durability: 'replicated'` waits for. */
  replication?: ReplicationOptions;
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
}

export type ResolvedReplicationOptions = Required<ReplicationOptions>;

export interface ResolvedConnectionOptions {
  redis: RedisConnection;
  durability: Durability;
  replication: ResolvedReplicationOptions;
  startupTimeoutMs: number;
  allowDegradedStart: boolean;
  requireNoEviction: boolean;
}

/** What `EventrailRedis` reads of the resolved module options. */
export type RedisView = ResolvedLogOptions & ResolvedConnectionOptions;

export const CONNECTION_OPTION_NAMES = optionNames<ConnectionOptions>()([
  'redis',
  'durability',
  'replication',
  'startupTimeoutMs',
  'allowDegradedStart',
  'requireNoEviction',
]);
export const REPLICATION_OPTION_NAMES = optionNames<ReplicationOptions>()(['replicas', 'timeoutMs']);
export const CLUSTER_OPTION_NAMES = optionNames<ClusterConnection['cluster']>()(['nodes', 'options']);
/** What `redis.sentinel` needs on top of ioredis's connection options. */
export const SENTINEL_REQUIRED_OPTION_NAMES = ['sentinels', 'name'] as const satisfies ReadonlyArray<keyof RedisOptions>;
/**
 * Every ioredis 6.1 connection option, for `redis.sentinel`, where a misspelt option (`sentinelPasword`)
 * would otherwise be ignored. An ioredis upgrade that adds one fails the build until it is listed.
 */
export const REDIS_OPTION_NAMES = optionNames<RedisOptions>()([
  ...(['host', 'port', 'path', 'family', 'tls', 'username', 'password', 'db'] as const),
  ...(['name', 'role', 'sentinels', 'sentinelUsername', 'sentinelPassword', 'sentinelTLS'] as const),
  ...(['enableTLSForSentinelMode', 'natMap', 'updateSentinels', 'sentinelMaxConnections', 'failoverDetector'] as const),
  ...(['sentinelRetryStrategy', 'sentinelReconnectStrategy', 'preferredSlaves', 'sentinelCommandTimeout'] as const),
  ...(['connectTimeout', 'disconnectTimeout', 'commandTimeout', 'socketTimeout', 'keepAlive', 'noDelay'] as const),
  ...(['blockingTimeout', 'blockingTimeoutGrace', 'retryStrategy', 'reconnectOnError', 'maxRetriesPerRequest'] as const),
  ...(['connectionName', 'disableClientInfo', 'clientInfoTag', 'readOnly', 'stringNumbers', 'protocol'] as const),
  ...(['replyMapping', 'monitor', 'maxLoadingRetryTime', 'enableAutoPipelining', 'autoPipeliningIgnoredCommands'] as const),
  ...(['offlineQueue', 'commandQueue', 'enableOfflineQueue', 'enableReadyCheck', 'lazyConnect', 'scripts'] as const),
  ...(['maintNotifications', 'maintEndpointType', 'maintRelaxedCommandTimeout', 'maintRelaxedSocketTimeout'] as const),
  ...([
    'autoResubscribe',
    'autoResendUnfulfilledCommands',
    'keyPrefix',
    'Connector',
    'himportFieldsets',
    'showFriendlyErrorStack',
  ] as const),
]);

/** `redis` is the last fallback, after `EVENTRAIL_REDIS_URL`. */
export const CONNECTION_DEFAULTS = Object.freeze({
  redis: 'redis://localhost:6379',
  durability: 'acknowledged',
  replication: Object.freeze({ replicas: 1, timeoutMs: 1_000 }),
  startupTimeoutMs: 10_000,
  allowDegradedStart: false,
  requireNoEviction: false,
} as const satisfies ResolvedConnectionOptions);

const DURABILITIES: readonly Durability[] = ['acknowledged', 'replicated'];

/**
 * Applies the defaults of the connection options (and `EVENTRAIL_REDIS_URL`) and validates them, naming
 * the option that is wrong. `redis` is checked first, before the module's other options.
 */
export function resolveRedisConnection(redis: unknown, env: NodeJS.ProcessEnv): RedisConnection {
  return checkRedisConnection(redis ?? env.EVENTRAIL_REDIS_URL ?? CONNECTION_DEFAULTS.redis);
}

/** The connection options but `redis` (see `resolveRedisConnection`). */
export function resolveStartupOptions(options: ConnectionOptions): Omit<ResolvedConnectionOptions, 'redis'> {
  const durability = checkOneOf('durability', options.durability ?? CONNECTION_DEFAULTS.durability, DURABILITIES);
  const given = options.replication ?? {};
  checkObject('replication', given, 'an object: { replicas?, timeoutMs? }');
  rejectUnknownKeys('replication', given, REPLICATION_OPTION_NAMES);
  const defaults = CONNECTION_DEFAULTS.replication;
  const replication = {
    replicas: checkInteger('replication.replicas', given.replicas ?? defaults.replicas, 1, 100),
    timeoutMs: checkInteger('replication.timeoutMs', given.timeoutMs ?? defaults.timeoutMs, 1, 600_000),
  };
  const startupTimeoutMs = checkInteger('startupTimeoutMs', options.startupTimeoutMs ?? CONNECTION_DEFAULTS.startupTimeoutMs, 1, 3_600_000);
  return {
    durability,
    replication,
    startupTimeoutMs,
    allowDegradedStart: checkBoolean('allowDegradedStart', options.allowDegradedStart ?? CONNECTION_DEFAULTS.allowDegradedStart),
    requireNoEviction: checkBoolean('requireNoEviction', options.requireNoEviction ?? CONNECTION_DEFAULTS.requireNoEviction),
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

/** A plain object with a `sentinel` object (a client's `sentinel` is a command method, a function). */
export function isSentinelConnection(value: unknown): value is SentinelConnection {
  const sentinel = (value as { sentinel?: unknown } | null)?.sentinel;
  return typeof value === 'object' && value !== null && typeof sentinel === 'object' && sentinel !== null;
}

export function isClusterConnection(value: unknown): value is ClusterConnection {
  const cluster = (value as { cluster?: unknown } | null)?.cluster;
  return typeof value === 'object' && value !== null && typeof cluster === 'object' && cluster !== null;
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
