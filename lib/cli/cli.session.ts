import type { INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { EventrailAdmin } from '../admin/eventrail-admin';
import { PartitionMismatchError } from '../errors/partition-mismatch.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { EventrailModule } from '../eventrail.module';
import { resolveModuleOptions } from '../eventrail.options';
import { EventrailPublisher } from '../log/eventrail.publisher';
import { readLogPartitions } from '../log/log-meta';
import type { RetentionOptions } from '../retention/retention.options';
import { LogNotFoundError } from './errors/log-not-found.error';
import { StderrLogger } from './stderr.logger';
import { redactUrl } from './value.format';

export interface SessionOptions {
  /** `--redis-url`; the module's fallback (`EVENTRAIL_REDIS_URL`, then localhost) applies when absent. */
  redisUrl?: string;
  /** `--prefix`; the module's fallback (`EVENTRAIL_PREFIX`, then `eventrail`) applies when absent. */
  prefix?: string;
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
    private readonly client: Redis,
    readonly prefix: string,
    readonly redisUrl: string,
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
    const url = resolved.redis as string;
    const prefix = resolved.prefix;
    const client = await connect(url, options.connectTimeoutMs, options.verbose);
    try {
      const recorded = await readLogPartitions(client, prefix);
      if (recorded === null && !options.createLog) throw new LogNotFoundError(prefix, redactUrl(url));
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
      return new CliSession(app, client, prefix, url, partitions);
    } catch (error) {
      client.disconnect();
      throw error;
    }
  }

  async close(): Promise<void> {
    await this.app.close();
    // The module never closes a client it was given.
    await this.client.quit().catch(() => this.client.disconnect());
  }
}

/**
 * Connects within `timeoutMs` or fails: an operator's command should say
 * "unreachable" in seconds, not retry for ever. The client is handed to the
 * module, so the CLI owns the one connection and its timeout.
 */
async function connect(url: string, timeoutMs: number, verbose: boolean): Promise<Redis> {
  const client = new Redis(url, { lazyConnect: true, connectTimeout: timeoutMs, maxRetriesPerRequest: 3 });
  // Every failed reconnect emits 'error'; without a listener the process would crash on it.
  let lastError: Error | undefined;
  client.on('error', (error: Error) => {
    lastError = error;
    if (verbose) process.stderr.write(`Redis connection error: ${error.message}\n`);
  });
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RedisUnavailableError(`no answer from ${redactUrl(url)} within ${timeoutMs} ms`)), timeoutMs);
  });
  const connecting = client.connect();
  connecting.catch(() => undefined); // the timeout may win the race; the loser's rejection is expected
  try {
    await Promise.race([connecting, timeout]);
    return client;
  } catch (error) {
    client.disconnect();
    if (error instanceof RedisUnavailableError) throw error;
    // connect() rejects with "Connection is closed."; the 'error' event before it says why (ECONNREFUSED, ENOTFOUND, WRONGPASS...).
    throw new RedisUnavailableError(`cannot connect to ${redactUrl(url)}`, lastError ?? error);
  } finally {
    clearTimeout(timer);
  }
}
