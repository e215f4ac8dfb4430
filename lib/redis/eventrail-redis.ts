import { Inject, Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import Redis, { Cluster, RedisOptions } from 'ioredis';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import { ownReplyReaderEnabled, readRepliesWithRespReader } from './own-reply-reader';
import { ClusterConnection, isClusterConnection, isSentinelConnection, RedisView, SentinelConnection } from './connection.options';
import { EvictionPolicyError, NodeEvictionPolicy } from '../errors/eviction-policy.error';
import { PartitionMismatchError } from '../errors/partition-mismatch.error';
import { RedisTlsError } from '../errors/redis-tls.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { EventrailKeys } from './keys';
import { EventrailScripts } from './eventrail-scripts';
import { describeError } from '../util/describe-error';
import { EventrailError } from '../errors/eventrail.error';
import { setTimeout as sleep } from 'node:timers/promises';
import { withTimeout } from '../util/timeout';
import { firstSeedError, permanentConnectionFailure } from './connection-failure';
import { type ProbeAnswer, ServerProbe } from './server-probe';
import { normalizeRedisUrl } from './redis-url';
import { RedisClock } from './redis-clock';

/** Idle time before the kernel starts probing an owned connection (`keepAlive`, see the constructor). */
const KEEPALIVE_MS = 10_000;

/** How long the shutdown's QUIT may wait for Redis before the connection is closed without it. */
export const QUIT_WAIT_MS = 1_000;

/** Between two tries of the startup checks after Redis went away during them. */
const STARTUP_RETRY_MS = 200;

/**
 * Replies that say the server is busy or moving (a restart loading its data, a failover), or full of
 * clients (`maxclients`: others may leave), not no.
 */
const TRANSIENT_REPLY = /^(?:LOADING|BUSY|TRYAGAIN|CLUSTERDOWN|MASTERDOWN|READONLY\b|ERR max number of clients reached)/;

/**
 * Whether a startup check that failed with `error` may succeed if tried again:
 * a lost connection or a busy server may; an answer (a partition mismatch, an
 * eviction policy refused, a certificate, a permission) will not.
 */
function retryableAtStartup(error: unknown): boolean {
  if (error instanceof EventrailError) return false;
  if (error instanceof Error && error.name === 'ReplyError') return TRANSIENT_REPLY.test(error.message);
  return true;
}

/**
 * Owns the connection to Redis: creates it from the options (or adopts the
 * application's client, which it then never closes), waits for it at startup
 * within `startupTimeoutMs`, registers the scripts and checks that the log's
 * recorded partition count matches the configured one.
 */
@Injectable()
export class EventrailRedis implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger(EventrailRedis.name);
  /** The connection; eventrail's scripts are called through `scripts`, never on it. */
  readonly client: Redis | Cluster;
  readonly keys: EventrailKeys;
  /** The typed door to eventrail's Lua scripts, on `client`. */
  readonly scripts: EventrailScripts;
  /** Redis's clock, which leases, done-marks and failure times are written on, as this process sees it. */
  readonly clock = new RedisClock();
  private readonly owned: boolean;
  private readonly duplicates = new Set<Redis | Cluster>();
  /** Remembers what each node refused (`CONFIG`, `INFO`, `ROLE`, `WAIT`), so it is never asked again. */
  private readonly probe = new ServerProbe();
  private prepared?: Promise<void>;
  /** Ends a startup still waiting for Redis (set while `onModuleInit` waits). */
  private endStartupWait?: () => void;

  constructor(@Inject(EVENTRAIL_OPTIONS) private readonly options: RedisView) {
    this.keys = new EventrailKeys(options.prefix, options.partitions);
    const { redis } = options;
    if (isClient(redis)) {
      this.client = redis;
      this.owned = false;
    } else {
      // A few retries per command while reconnecting, instead of ioredis's 20: a
      // publish during an outage should fail in seconds, not hang.
      // No CLIENT SETINFO on connect: an ACL user given eventrail's rules may not run it (Redis 7.0 has no
      // such subcommand to grant), and on Redis 7.2+ and Valkey every connection then leaves a denial in
      // ACL LOG. A user's own `disableClientInfo: false` still wins.
      // TCP keepalive after 10 s idle instead of ioredis's 30 s: a path that drops packets without a reset
      // leaves the connection 'ready', and on an idle connection (or one waiting in XREAD BLOCK, whose
      // command was acknowledged) the kernel's probes, 1 s apart and 10 of them with libuv, then fail it in
      // about 20 s instead of never. It costs one empty packet per idle 10 s and no timer in the process. It
      // cannot help while a command is unacknowledged (retransmission takes over, about 15 minutes), which
      // is why every publish has its own `publishTimeoutMs`. The user's own `keepAlive` wins.
      const base = { maxRetriesPerRequest: 3, disableClientInfo: true, keepAlive: KEEPALIVE_MS };
      const client = createClient(redis, base);
      // ioredis emits 'error' on every failed reconnect; log it once per outage instead of crashing.
      let reported = false;
      client.on('error', (error: Error) => {
        if (!reported) this.logger.warn(`Redis connection error: ${error.message}`);
        reported = true;
      });
      client.on('ready', () => (reported = false));
      // Its replies (each publish's XADD, a transaction's QUEUED and EXEC) are read by eventrail's own reader, as
      // a worker's reads are (own-reply-reader.ts); never on the application's own client, which it may subscribe.
      if ((client as { isCluster?: boolean }).isCluster !== true && ownReplyReaderEnabled()) readRepliesWithRespReader(client as Redis);
      this.client = client;
      this.owned = true;
    }
    this.scripts = new EventrailScripts(this.client, this.keys);
  }

  async onModuleInit(): Promise<void> {
    try {
      await this.waitUntilReady(this.options.startupTimeoutMs);
    } catch (error) {
      // A degraded start is for a Redis that does not answer yet, not for one whose settings were refused
      // or whose certificate no retry will make trusted.
      if (!this.options.allowDegradedStart || error instanceof EvictionPolicyError || error instanceof RedisTlsError) {
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

  /**
   * Runs a startup step (the log's checks, joining a group, subscribing),
   * trying it again every 200 ms while it fails the way a Redis that went away
   * fails (see `retryableAtStartup`) and `wanted()` (false once the app is
   * stopping: asked after each failure and again after each wait, so a stop
   * during the wait is not followed by another try); after
   * `startupTimeoutMs` of that, fails with `RedisUnavailableError` carrying
   * the last failure. No longer wanted, it fails with the last failure.
   */
  async retryAtStartup<T>(step: () => Promise<T>, wanted: () => boolean, onFailure?: (error: Error) => void): Promise<T> {
    const timeoutMs = this.options.startupTimeoutMs;
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      try {
        return await step();
      } catch (error) {
        if (!wanted() || !retryableAtStartup(error)) throw error;
        if (error instanceof Error) onFailure?.(error);
        if (performance.now() + STARTUP_RETRY_MS > deadline) {
          throw new RedisUnavailableError(`still failing after startupTimeoutMs (${timeoutMs} ms) at startup`, error);
        }
        await sleep(STARTUP_RETRY_MS);
        if (!wanted()) throw error;
      }
    }
  }

  /** True on Redis Cluster, where one pipeline may only touch one slot. */
  get isCluster(): boolean {
    return (this.client as { isCluster?: boolean }).isCluster === true;
  }

  /** True while the connection is usable; publish refuses otherwise instead of queueing. */
  isReady(): boolean {
    return this.client.status === 'ready';
  }

  /**
   * A connection of a partition worker's reads: as `duplicate()`, with its replies read by eventrail's own
   * RESP reader instead of ioredis's decoder (own-reply-reader.ts; not on a Cluster, and not where
   * `EVENTRAIL_REPLY_READER=ioredis`).
   */
  duplicateForReads(): Redis | Cluster {
    const connection = this.duplicate();
    if (!this.isCluster && ownReplyReaderEnabled()) readRepliesWithRespReader(connection as Redis);
    return connection;
  }

  /** A new connection with the same options, for blocking reads; closed on shutdown. */
  duplicate(): Redis | Cluster {
    // Where INFO is refused, ioredis's ready check would warn on every new connection: skip it (it was skipped anyway).
    const quiet = !this.isCluster && this.probe.refusal(this.client as unknown as Redis, 'INFO') !== undefined;
    let connection: Redis | Cluster;
    if (this.isCluster) {
      const cluster = this.client as Cluster;
      connection = cluster.duplicate([], { redisOptions: { ...cluster.options.redisOptions, ...REPLY_SHAPES } });
    } else connection = (this.client as Redis).duplicate({ ...REPLY_SHAPES, ...(quiet ? { enableReadyCheck: false } : {}) });
    connection.on('error', () => undefined); // failures surface on the blocked command itself
    this.duplicates.add(connection);
    connection.once('end', () => this.duplicates.delete(connection));
    return connection;
  }

  async onApplicationShutdown(): Promise<void> {
    this.endStartupWait?.();
    for (const connection of this.duplicates) connection.disconnect();
    this.duplicates.clear();
    if (!this.owned) return;
    // QUIT waits for the replies still due; a connection that looks ready but gets no answer (a network cut
    // that closed nothing) would wait for ever, so it is closed after QUIT_WAIT_MS all the same.
    const quit = this.client.quit().then(
      () => true,
      () => false,
    );
    if (!(await withTimeout(quit, QUIT_WAIT_MS, () => false))) this.client.disconnect();
  }

  private async waitUntilReady(timeoutMs: number): Promise<void> {
    let lastError: Error | undefined;
    const keep = (error: Error): void => void (lastError = error);
    let waiting = true;
    // Redis can go away between the connection's 'ready' and the log's checks (a restart, a failover):
    // those are tried again until startupTimeoutMs, as the connection itself is.
    const prepared = this.retryAtStartup(
      () => this.whenPrepared(),
      () => waiting,
      (error) => (lastError = error),
    );
    // A shutdown while this waits (a transport closed during its start) ends the wait, and with it the timer.
    const ended = new Promise<never>((_, reject) => {
      this.endStartupWait = () => reject(new RedisUnavailableError('shut down while waiting for Redis at startup', lastError));
    });
    this.client.on('error', keep);
    try {
      await withTimeout(Promise.race([prepared, ended]), timeoutMs, () => {
        throw new RedisUnavailableError(`no answer within startupTimeoutMs (${timeoutMs} ms) at startup`, lastError);
      });
    } finally {
      waiting = false;
      this.endStartupWait = undefined;
      this.client.off('error', keep);
    }
  }

  private async prepare(): Promise<void> {
    if (this.client.status !== 'ready') {
      if (this.client.status === 'wait') void this.client.connect().catch(() => undefined);
      await this.untilConnected();
    }
    // Read first: an existing log needs no write, so a read-only user (dashboard, CLI) can attach to it.
    let recorded = Number(await this.client.hget(this.keys.meta, 'partitions'));
    if (!recorded) {
      const replies = await this.client
        .multi()
        .hsetnx(this.keys.meta, 'partitions', String(this.options.partitions))
        .hsetnx(this.keys.meta, 'createdAt', String(Date.now()))
        .hget(this.keys.meta, 'partitions')
        .exec();
      recorded = Number(replies?.[2]?.[1]);
    }
    if (recorded !== this.options.partitions) {
      throw new PartitionMismatchError(this.options.prefix, this.options.partitions, recorded);
    }
    await this.scripts.markIndexedFrom();
    await this.checkServer();
  }

  /**
   * Resolves on 'ready'; rejects at the first connection error that no retry
   * cures (a TLS certificate the client does not trust), so a wrong CA fails
   * startup in milliseconds instead of after `startupTimeoutMs`.
   */
  private untilConnected(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const onReady = (): void => {
        this.client.off('error', onError);
        resolve();
      };
      let probed = false;
      const onError = (error: Error): void => {
        const permanent = permanentConnectionFailure(error, this.describeTarget());
        if (permanent !== undefined) {
          this.client.off('ready', onReady);
          this.client.off('error', onError);
          reject(permanent);
        } else if (this.isCluster && !probed) {
          // A cluster drops its nodes' own errors ("Failed to refresh slots cache."): ask the seeds once, plainly, why.
          probed = true;
          void this.seedFailure().then((failure) => failure && onError(failure));
        }
      };
      this.client.once('ready', onReady);
      this.client.on('error', onError);
    });
  }

  /** Why the cluster's seeds refuse a plain connection with the cluster's node options, if they do. */
  private async seedFailure(): Promise<Error | undefined> {
    const cluster = this.client as unknown as { startupNodes?: unknown[]; options: { redisOptions?: RedisOptions } };
    const seeds = (cluster.startupNodes ?? []).filter(
      (seed): seed is { host: string; port: number } => typeof (seed as { port?: unknown }).port === 'number',
    );
    return firstSeedError(
      seeds.map(({ host, port }) => ({ host: host ?? 'localhost', port })),
      cluster.options.redisOptions ?? {},
      2_000,
    );
  }

  /** Where the client dials, for messages (no credentials): `host:port`, the cluster's seeds or the sentinels. */
  private describeTarget(): string {
    if (this.isCluster) {
      const seeds = (this.client as unknown as { startupNodes?: Array<{ host?: string; port?: number } | string> }).startupNodes ?? [];
      return seeds.map((seed) => (typeof seed === 'string' ? seed : `${seed.host ?? 'localhost'}:${seed.port ?? 6379}`)).join(',');
    }
    const { host, port, sentinels, name } = (this.client as unknown as Redis).options;
    if (Array.isArray(sentinels)) return `Sentinel primary "${name}" (via ${sentinels.map((s) => `${s.host}:${s.port}`).join(',')})`;
    return `${host ?? 'localhost'}:${port ?? 6379}`;
  }

  /**
   * The `maxmemory-policy` of every primary (one on a single Redis), from
   * `CONFIG GET`, or from `INFO memory` where `CONFIG` is refused (managed
   * Redis); `policy` is null where neither answers. Startup and the health
   * check both read it here; a refused command is not sent to that node again.
   */
  async evictionPolicies(): Promise<NodeEvictionPolicy[]> {
    const answers = await this.readEvictionPolicies();
    return answers.map(({ node, answer }) => ({ node, policy: answer.ok ? answer.value : null }));
  }

  /**
   * The primary this client writes to and its replicas, from `ROLE` (or
   * `INFO replication` where `ROLE` is refused); behind Sentinel, the primary
   * it was sent to. Where both are refused, the address connected to, with no
   * replicas named.
   */
  async replication(): Promise<{ node: string; replicas: string[] }> {
    const node = this.client as unknown as Redis;
    const connected = connectedAddress(node);
    const role = await this.probe.role(node);
    if (role.ok)
      return role.value.role === 'master'
        ? { node: connected, replicas: role.value.replicas }
        : { node: role.value.primary ?? connected, replicas: [connected] };
    const count = await this.probe.infoField(node, 'replication', 'connected_slaves');
    if (!count.ok || count.value === null) return { node: connected, replicas: [] };
    const info = await node.info('replication').catch(() => '');
    const replicas = [...info.matchAll(/^slave\d+:ip=([^,]+),port=(\d+)/gm)].map(([, host, port]) => `${host}:${port}`);
    return { node: connected, replicas };
  }

  /** `used_memory` from `INFO memory`, null where INFO is refused (asked once) or on a cluster. */
  async usedMemoryBytes(): Promise<number | null> {
    if (this.isCluster) return null;
    const answer = await this.probe.infoField(this.client as unknown as Redis, 'memory', 'used_memory');
    return answer.ok && answer.value !== null ? Number(answer.value) : null;
  }

  private readEvictionPolicies(): Promise<Array<{ node: string; answer: ProbeAnswer<string | null> }>> {
    const nodes = this.isCluster ? (this.client as unknown as Cluster).nodes('master') : [this.client as unknown as Redis];
    return Promise.all(
      nodes.map(async (node) => {
        const fromConfig = await this.probe.configGet(node, 'maxmemory-policy');
        if (fromConfig.ok && fromConfig.value !== null) return { node: nodeName(node), answer: fromConfig };
        const fromInfo = await this.probe.infoField(node, 'memory', 'maxmemory_policy');
        if (fromInfo.ok && fromInfo.value !== null) return { node: nodeName(node), answer: fromInfo };
        const refused = [fromConfig, fromInfo].map((a) => (a.ok ? 'no answer' : a.refused)).join('; ');
        return { node: nodeName(node), answer: { ok: false as const, refused } };
      }),
    );
  }

  /**
   * What startup checks besides the log: persistence, the eviction policy,
   * and `WAIT` when publishing defaults to `durability: 'replicated'`. What a
   * managed Redis or an ACL user would not tell is said once, in one warning;
   * eventrail runs without it.
   */
  private async checkServer(): Promise<void> {
    const unchecked: string[] = [];
    await this.checkDurability(unchecked);
    await this.checkEviction(unchecked);
    await this.checkWait(unchecked);
    if (unchecked.length > 0) {
      this.logger.warn(
        `Redis refused what eventrail checks at startup, so these were not checked: ${unchecked.join('; ')}. ` +
          'eventrail runs without them; make sure the provider keeps appendonly (or equivalent persistence) on and maxmemory-policy noeviction.',
      );
    }
  }

  /**
   * Any policy but `noeviction` lets a full Redis delete the log, offsets and
   * leases: warn with the fix, or refuse to start with `requireNoEviction`.
   */
  private async checkEviction(unchecked: string[]): Promise<void> {
    const answers = await this.readEvictionPolicies();
    for (const { node, answer } of answers) {
      if (!answer.ok)
        unchecked.push(
          `eviction policy of ${node} (${answer.refused})${this.options.requireNoEviction ? ', so requireNoEviction could not be enforced' : ''}`,
        );
    }
    const evicting = answers.flatMap(({ node, answer }) =>
      answer.ok && answer.value !== 'noeviction' ? [{ node, policy: answer.value }] : [],
    );
    if (evicting.length === 0) return;
    if (this.options.requireNoEviction) throw new EvictionPolicyError(evicting);
    const where = evicting.map((n) => `${n.node} (maxmemory-policy ${n.policy})`).join(', ');
    this.logger.warn(
      `Redis ${where} evicts keys when memory runs out: it can delete events, committed offsets (groups replay from their initial offset) ` +
        'and leases, even after publish resolved. Fix: redis-cli CONFIG SET maxmemory-policy noeviction (and maxmemory-policy noeviction ' +
        'in redis.conf), or give eventrail a Redis of its own; requireNoEviction: true refuses to start instead.',
    );
  }

  /** Warns when Redis would lose acknowledged events on a crash: `CONFIG GET appendonly`, else `INFO persistence`. */
  private async checkDurability(unchecked: string[]): Promise<void> {
    const nodes = this.isCluster ? (this.client as unknown as Cluster).nodes('master') : [this.client as unknown as Redis];
    const without: string[] = [];
    for (const node of nodes) {
      const fromConfig = await this.probe.configGet(node, 'appendonly');
      let appendonly = fromConfig.ok ? fromConfig.value : null;
      if (appendonly === null) {
        const fromInfo = await this.probe.infoField(node, 'persistence', 'aof_enabled');
        if (fromInfo.ok && fromInfo.value !== null) appendonly = fromInfo.value === '1' ? 'yes' : 'no';
        else if (!fromConfig.ok && !fromInfo.ok)
          unchecked.push(`persistence of ${nodeName(node)} (${fromConfig.refused}; ${fromInfo.refused})`);
      }
      if (appendonly === 'no') without.push(nodeName(node));
    }
    if (without.length > 0) {
      const where = this.isCluster ? `Redis ${without.join(', ')} run` : 'Redis runs';
      this.logger.warn(
        `${where} without AOF (appendonly no): a Redis crash loses events appended since the last snapshot, ` +
          'even after publish resolved. Fix: redis-cli CONFIG SET appendonly yes (and appendonly yes in redis.conf).',
      );
    }
  }

  /** With `durability: 'replicated'` as the default, a refused `WAIT` would fail every publish: say so now. */
  private async checkWait(unchecked: string[]): Promise<void> {
    if (this.options.durability !== 'replicated' || this.isCluster) return;
    const answer = await this.probe.wait(this.client as unknown as Redis);
    if (!answer.ok) unchecked.push(`WAIT (${answer.refused}), so publishes with durability 'replicated' cannot be confirmed`);
  }
}

/** `host:port` the connection reached: behind Sentinel, the primary it resolved, which the options do not hold. */
function connectedAddress(node: Redis): string {
  const stream = (node as unknown as { stream?: { remoteAddress?: string; remotePort?: number } }).stream;
  if (stream?.remoteAddress && stream.remotePort) return `${stream.remoteAddress.replace(/^::ffff:/, '')}:${stream.remotePort}`;
  return nodeName(node);
}

function createClient(redis: string | RedisOptions | ClusterConnection | SentinelConnection, base: RedisOptions): Redis | Cluster {
  if (typeof redis === 'string') return new Redis(normalizeRedisUrl(redis), { ...base, ...REPLY_SHAPES });
  if (isClusterConnection(redis)) {
    const { nodes, options = {} } = redis.cluster;
    return new Cluster(nodes, { ...options, redisOptions: { ...base, ...options.redisOptions, ...REPLY_SHAPES } });
  }
  const options = isSentinelConnection(redis) ? redis.sentinel : redis;
  if (!Array.isArray(options.sentinels)) return new Redis({ ...base, ...options, ...REPLY_SHAPES });
  return new Redis({ ...base, ...sentinelDefaults(options), ...options, ...REPLY_SHAPES });
}

/**
 * The reply shapes eventrail reads: ioredis's default `legacy` mapping (RESP3 maps, `XREAD` and `ZRANGE
 * WITHSCORES` as flat arrays, doubles as strings). Every connection eventrail opens keeps it whatever the
 * options say: under `replyMapping: 'resp3'` its workers read nothing (an `XREAD` answered as an object).
 * What it reads on a client the application passes in copes with either (see map-reply.ts).
 */
const REPLY_SHAPES = { replyMapping: 'legacy' } as const satisfies RedisOptions;

/**
 * What a client behind Sentinel needs to follow a failover without a restart:
 * ask the sentinels again when the node it writes to has become a replica
 * (`READONLY`: reconnect and resend), and listen for the sentinels'
 * `+switch-master`, so even an idle or subscribed connection moves at once.
 * A `tls` option is meant for the primary too, which ioredis only applies with
 * `enableTLSForSentinelMode`. The user's own options win over all three.
 */
function sentinelDefaults(options: RedisOptions): RedisOptions {
  return {
    failoverDetector: true,
    reconnectOnError: (error: Error) => (error.message.startsWith('READONLY') ? 2 : false),
    ...(options.tls !== undefined ? { enableTLSForSentinelMode: true } : {}),
  };
}

function nodeName(node: Redis): string {
  const { host, port } = node.options;
  return `${host ?? 'localhost'}:${port ?? 6379}`;
}

function isClient(value: unknown): value is Redis | Cluster {
  if (value instanceof Redis || value instanceof Cluster) return true;
  // A client from another copy of ioredis.
  const candidate = value as { xadd?: unknown; duplicate?: unknown; defineCommand?: unknown };
  return typeof candidate.xadd === 'function' && typeof candidate.duplicate === 'function' && typeof candidate.defineCommand === 'function';
}
