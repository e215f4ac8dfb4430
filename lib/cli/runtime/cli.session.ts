import type { INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Cluster, Redis } from 'ioredis';
import { EventrailAdmin } from '../../admin/eventrail-admin';
import { PartitionMismatchError } from '../../errors/partition-mismatch.error';
import { EventrailModule } from '../../module/eventrail.module';
import { resolveModuleOptions } from '../../module/eventrail.options';
import { EventrailPublisher } from '../../publisher/eventrail.publisher';
import { readLogPartitions } from '../../redis/log-meta';
import type { RetentionOptions } from '../../retention/retention.options';
import { LogNotFoundError } from '../errors/log-not-found.error';
import { closeRedis, connectRedis, describeTarget, type RedisTarget, type TlsFilePaths } from './redis.connector';
import { StderrLogger } from './stderr.logger';

export interface SessionOptions {
  /** `--redis-url`; the module's fallback (`EVENTRAIL_REDIS_URL`, then localhost) applies when absent. */
  redisUrl?: string;
  /** `--cluster` / `EVENTRAIL_REDIS_CLUSTER`: `redisUrl` is a comma-separated list of Redis Cluster seed nodes. */
  cluster: boolean;
  /** `--prefix`; the module's fallback (`EVENTRAIL_PREFIX`, then `eventrail`) applies when absent. */
  prefix?: string;
  /** PEM files for a `rediss://` connection (`--tls-*`, `EVENTRAIL_REDIS_TLS_*`). */
  tls?: TlsFilePaths;
  /** How long to wait for Redis before failing. */
  connectTimeoutMs: number;
  /** Nest and library logs on stderr. */
  verbose: boolean;
  /**
   * Create the log when none exists at the prefix (only `publish` does), with
   * `partitions` or the library default. Without it a missing log is an error.
   */
  createLog?: { partitions?: number };
  /** Retention options, for `retention run` and archive restores. */
  retention?: RetentionOptions;
}

/**
 * A connection to one log: a Nest application context with `EventrailModule`
 * and no handlers, so no consumer starts and the process joins no group.
 * The partition count is read from the log before booting, since the module
 * refuses any other.
 */
export class CliSession {
  private constructor(
    private readonly app: INestApplicationContext,
    private readonly client: Redis | Cluster,
    readonly prefix: string,
    /** The URL, or the cluster's seed URLs, with passwords redacted. */
    readonly redis: string,
    readonly cluster: boolean,
    readonly partitions: number,
  ) {}

  get admin(): EventrailAdmin {
    return this.app.get(EventrailAdmin);
  }

  get publisher(): EventrailPublisher {
    return this.app.get(EventrailPublisher);
  }

  static async open(options: SessionOptions): Promise<CliSession> {
    // Validates the URL, the prefix and the retention options, and applies the env fallbacks, before any connection.
    const resolved = resolveModuleOptions({
      redis: options.redisUrl,
      prefix: options.prefix,
      partitions: options.createLog?.partitions,
      retention: options.retention,
    });
    const target: RedisTarget = { url: resolved.redis as string, cluster: options.cluster, tls: options.tls };
    const prefix = resolved.prefix;
    const client = await connectRedis(target, options.connectTimeoutMs, options.verbose);
    try {
      const recorded = await readLogPartitions(client, prefix);
      if (recorded === null && !options.createLog) throw new LogNotFoundError(prefix, describeTarget(target));
      const wanted = options.createLog?.partitions;
      if (recorded !== null && wanted !== undefined && wanted !== recorded) throw new PartitionMismatchError(prefix, wanted, recorded);
      const partitions = recorded ?? resolved.partitions;
      const app = await NestFactory.createApplicationContext(
        {
          imports: [
            EventrailModule.forRoot({
              redis: client,
              prefix,
              partitions,
              autoStart: false,
              startupTimeoutMs: options.connectTimeoutMs,
              retention: options.retention,
            }),
          ],
        },
        // abortOnError: Nest would otherwise abort the process on a failed init instead of throwing.
        { logger: options.verbose ? new StderrLogger() : false, abortOnError: false },
      );
      return new CliSession(app, client, prefix, describeTarget(target), target.cluster, partitions);
    } catch (error) {
      client.disconnect();
      throw error;
    }
  }

  async close(): Promise<void> {
    await this.app.close();
    // The module never closes a client it was given.
    await closeRedis(this.client);
  }
}
