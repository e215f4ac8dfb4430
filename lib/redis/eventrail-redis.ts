import { Inject, Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import Redis, { Cluster, RedisOptions } from 'ioredis';
import { EVENTRAIL_OPTIONS } from '../eventrail.constants';
import { ClusterConnection, isClusterConnection, ResolvedEventrailOptions } from '../eventrail.options';
import { PartitionMismatchError } from '../errors/partition-mismatch.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { EventrailKeys } from '../log/keys';
import { EventrailClient, registerScripts } from '../scripts/scripts';
import { describeError } from '../util/describe-error';
import { withTimeout } from '../util/timeout';

/**
 * Owns the connection to Redis: creates it from the options (or adopts the
 * application's client, which it then never closes), waits for it at startup
 * within `startupTimeoutMs`, registers the scripts and checks that the log's
 * recorded partition count matches the configured one.
 */
@Injectable()
export class EventrailRedis implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger(EventrailRedis.name);
  readonly client: EventrailClient;
  readonly keys: EventrailKeys;
  private readonly owned: boolean;
  private readonly duplicates = new Set<Redis | Cluster>();
  private prepared?: Promise<void>;

  constructor(@Inject(EVENTRAIL_OPTIONS) private readonly options: ResolvedEventrailOptions) {
    this.keys = new EventrailKeys(options.prefix, options.partitions);
    const { redis } = options;
    if (isClient(redis)) {
      this.client = registerScripts(redis);
      this.owned = false;
    } else {
      // A few retries per command while reconnecting, instead of ioredis's 20: a
      // publish during an outage should fail in seconds, not hang.
      const base = { maxRetriesPerRequest: 3 };
      const client = createClient(redis, base);
      // ioredis emits 'error' on every failed reconnect; log it once per outage instead of crashing.
      let reported = false;
      client.on('error', (error: Error) => {
        if (!reported) this.logger.warn(`Redis connection error: ${error.message}`);
        reported = true;
      });
      client.on('ready', () => (reported = false));
      this.client = registerScripts(client);
      this.owned = true;
    }
  }

  async onModuleInit(): Promise<void> {
    try {
      await this.waitUntilReady(this.options.startupTimeoutMs);
    } catch (error) {
      if (!this.options.allowDegradedStart) {
        // Nest runs no shutdown hooks after a failed init: stop reconnecting here.
        if (this.owned) this.client.disconnect();
        throw error;
      }
      this.logger.warn(`Starting degraded: ${describeError(error)}. Publishing fails until Redis answers.`);
      return;
    }
  }

  /** Resolves once Redis answers and the log's metadata has been checked; consumers wait on it. */
  whenPrepared(): Promise<void> {
    this.prepared ??= this.prepare().catch((error: unknown) => {
      this.prepared = undefined;
      throw error;
    });
    return this.prepared;
  }

  /** True on Redis Cluster, where one pipeline may only touch one slot. */
  get isCluster(): boolean {
    return (this.client as { isCluster?: boolean }).isCluster === true;
  }

  /** True while the connection is usable; publish refuses otherwise instead of queueing. */
  isReady(): boolean {
    return this.client.status === 'ready';
  }

  /** A new connection with the same options, for blocking reads; closed on shutdown. */
  duplicate(): Redis | Cluster {
    const connection = (this.client as { duplicate(): Redis | Cluster }).duplicate();
    connection.on('error', () => undefined); // failures surface on the blocked command itself
    this.duplicates.add(connection);
    connection.once('end', () => this.duplicates.delete(connection));
    return connection;
  }

  async onApplicationShutdown(): Promise<void> {
    for (const connection of this.duplicates) connection.disconnect();
    this.duplicates.clear();
    if (this.owned) await this.client.quit().catch(() => this.client.disconnect());
  }

  private async waitUntilReady(timeoutMs: number): Promise<void> {
    await withTimeout(this.whenPrepared(), timeoutMs, () => {
      throw new RedisUnavailableError(`no answer within startupTimeoutMs (${timeoutMs} ms) at startup`);
    });
  }

  private async prepare(): Promise<void> {
    if (this.client.status !== 'ready') {
      if (this.client.status === 'wait') void this.client.connect().catch(() => undefined);
      await new Promise<void>((resolve) => this.client.once('ready', () => resolve()));
    }
    const now = String(Date.now());
    const replies = await this.client
      .multi()
      .hsetnx(this.keys.meta, 'partitions', String(this.options.partitions))
      .hsetnx(this.keys.meta, 'createdAt', now)
      .hget(this.keys.meta, 'partitions')
      .exec();
    const recorded = Number(replies?.[2]?.[1]);
    if (recorded !== this.options.partitions) {
      throw new PartitionMismatchError(this.options.prefix, this.options.partitions, recorded);
    }
    await this.checkDurability();
  }

  /** Warns when Redis would lose acknowledged events on a crash. Managed Redis often disables CONFIG: then say nothing loud. */
  private async checkDurability(): Promise<void> {
    let appendonly: string | undefined;
    try {
      const reply = (await this.client.config('GET', 'appendonly')) as unknown as string[];
      appendonly = reply?.[1];
    } catch (error) {
      this.logger.debug(`Could not read Redis persistence settings (${describeError(error)}); skipping the durability check`);
      return;
    }
    if (appendonly === 'no') {
      this.logger.warn(
        'Redis runs without AOF (appendonly no): a Redis crash loses events appended since the last snapshot, ' +
          'even after publish resolved. Fix: redis-cli CONFIG SET appendonly yes (and appendonly yes in redis.conf).',
      );
    }
  }
}

function createClient(redis: string | RedisOptions | ClusterConnection, base: RedisOptions): Redis | Cluster {
  if (typeof redis === 'string') return new Redis(redis, base);
  if (isClusterConnection(redis)) {
    const { nodes, options = {} } = redis.cluster;
    return new Cluster(nodes, { ...options, redisOptions: { ...base, ...options.redisOptions } });
  }
  return new Redis({ ...base, ...redis });
}

function isClient(value: unknown): value is Redis | Cluster {
  if (value instanceof Redis || value instanceof Cluster) return true;
  // A client from another copy of ioredis.
  const candidate = value as { xadd?: unknown; duplicate?: unknown; defineCommand?: unknown };
  return typeof candidate.xadd === 'function' && typeof candidate.duplicate === 'function' && typeof candidate.defineCommand === 'function';
}
