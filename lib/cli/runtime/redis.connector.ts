import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import Redis, { Cluster } from 'ioredis';
import { RedisUnavailableError } from '../../errors/redis-unavailable.error';
import { type ClusterSeeds, parseClusterSeeds, splitSeeds } from './cluster-seeds.parser';
import { CliUsageError } from '../errors/cli-usage.error';
import { escapeControls } from '../../util/control-chars';
import { withTimeout } from '../../util/timeout';
import { redactUrl, redactUrlsIn } from '../../util/redact-url';
import { firstSeedError, permanentConnectionFailure } from '../../redis/connection-failure';
import { normalizeRedisUrl } from '../../redis/redis-url';

/** Where the CLI connects. */
export interface RedisTarget {
  /** One Redis URL; with `cluster`, a comma-separated list of seed node URLs. */
  url: string;
  /** `--cluster` / `EVENTRAIL_REDIS_CLUSTER`. */
  cluster: boolean;
  /** `--tls-ca`, `--tls-cert`, `--tls-key` (or `EVENTRAIL_REDIS_TLS_*`): PEM file paths, for `rediss://` URLs. */
  tls?: TlsFilePaths;
}

export interface TlsFilePaths {
  ca?: string;
  cert?: string;
  key?: string;
}

/** How long `closeRedis` waits for QUIT before dropping the connections. */
const QUIT_TIMEOUT_MS = 1_000;

/** The target as messages and `status` show it, passwords replaced by `***`. */
export function describeTarget(target: RedisTarget): string {
  return target.cluster ? splitSeeds(target.url).map(redactUrl).join(',') : redactUrl(target.url);
}

/**
 * Connects within `timeoutMs` or fails: an operator's command should say
 * "unreachable" in seconds, not retry for ever. The client is handed to the
 * module, so the CLI owns the connection and its timeout, on a single Redis
 * and on a cluster alike.
 */
export async function connectRedis(target: RedisTarget, timeoutMs: number, verbose: boolean): Promise<Redis | Cluster> {
  const tls = readTlsFiles(target);
  const seeds = target.cluster ? withTls(parseClusterSeeds(target.url), tls) : undefined;
  const client = seeds ? createCluster(seeds, timeoutMs) : createRedis(normalizeRedisUrl(target.url), timeoutMs, tls);
  const where = target.cluster ? `Redis Cluster seeds ${describeTarget(target)}` : describeTarget(target);
  // Every failed reconnect emits 'error'; without a listener the process would crash on it.
  let lastError: Error | undefined;
  client.on('error', (error: Error) => {
    lastError = error;
    if (verbose) process.stderr.write(`Redis connection error: ${escapeControls(redactUrlsIn(error.message))}\n`);
  });
  try {
    await withTimeout(client.connect(), timeoutMs, () => {
      throw new RedisUnavailableError(`no answer from ${where} within ${timeoutMs} ms`);
    });
    return client;
  } catch (error) {
    client.disconnect();
    if (error instanceof RedisUnavailableError) throw error;
    // connect() rejects with "Connection is closed." (a cluster: "None of startup nodes is available");
    // the 'error' event before it says why (ECONNREFUSED, WRONGPASS, cluster support disabled...).
    let cause = rootCause(lastError) ?? error;
    if (seeds && isConnectionClosed(cause)) cause = (await firstSeedError(seeds.nodes, seeds.redisOptions, timeoutMs)) ?? cause;
    throw permanentConnectionFailure(cause, where) ?? new RedisUnavailableError(`cannot connect to ${where}`, cause);
  }
}

/** QUIT, so the servers see a clean goodbye; a client that cannot say it in time (a node gone) is dropped instead. */
export async function closeRedis(client: Redis | Cluster): Promise<void> {
  const quit = client.quit().then(
    () => true,
    () => false,
  );
  if (!(await withTimeout(quit, QUIT_TIMEOUT_MS, () => false))) client.disconnect();
}

// Reconnect attempts fail a command after a few retries instead of ioredis's 20, as the module does.
const MAX_RETRIES_PER_REQUEST = 3;

function createRedis(url: string, timeoutMs: number, tls: ConnectionOptions | undefined): Redis {
  if (splitSeeds(url).length > 1)
    throw new CliUsageError(
      `The Redis URL lists several nodes (${describeTarget({ url, cluster: true })}): pass --cluster (or EVENTRAIL_REDIS_CLUSTER=1) for Redis Cluster`,
    );
  // ioredis would throw a bare "Invalid URL"; this one says which, without its password.
  if (!URL.canParse(url))
    throw new CliUsageError(`Invalid Redis URL "${redactUrl(url)}": expected redis://[user:password@]host[:port][/db] or rediss://...`);
  return new Redis(url, {
    lazyConnect: true,
    connectTimeout: timeoutMs,
    maxRetriesPerRequest: MAX_RETRIES_PER_REQUEST,
    ...(tls ? { tls } : {}),
  });
}

/**
 * The PEM files of `--tls-ca`, `--tls-cert` and `--tls-key`, read before
 * connecting: a path that cannot be read is a usage error that names the
 * flag. They need a `rediss://` URL, so a TLS setup is never silently
 * ignored on a plain connection.
 */
function readTlsFiles({ tls, url }: RedisTarget): ConnectionOptions | undefined {
  const given = Object.entries(tls ?? {}).filter((entry): entry is [keyof TlsFilePaths, string] => entry[1] !== undefined);
  if (given.length === 0) return undefined;
  if (!splitSeeds(url).every((seed) => /^(rediss|valkeys):\/\//i.test(seed)))
    throw new CliUsageError(
      `--tls-${given[0][0]} needs a TLS URL: rediss:// (or valkeys://), got "${describeTarget({ url, cluster: false })}"`,
    );
  if ((tls?.cert === undefined) !== (tls?.key === undefined))
    throw new CliUsageError('--tls-cert and --tls-key go together (a client certificate and its key)');
  const options: ConnectionOptions = {};
  for (const [name, path] of given) {
    try {
      options[name] = readFileSync(path, 'utf8');
    } catch (error) {
      throw new CliUsageError(`Cannot read --tls-${name} ${path}: ${(error as Error).message}`);
    }
  }
  return options;
}

function withTls(seeds: ClusterSeeds, tls: ConnectionOptions | undefined): ClusterSeeds {
  return tls ? { ...seeds, redisOptions: { ...seeds.redisOptions, tls } } : seeds;
}

function createCluster({ nodes, redisOptions }: ClusterSeeds, timeoutMs: number): Cluster {
  return new Cluster(nodes, {
    lazyConnect: true,
    redisOptions: { ...redisOptions, connectTimeout: timeoutMs, maxRetriesPerRequest: MAX_RETRIES_PER_REQUEST },
  });
}

/** ioredis reports a cluster that no seed could map as "Failed to refresh slots cache."; the last node's error says why. */
function rootCause(error: Error | undefined): Error | undefined {
  return (error as { lastNodeError?: Error } | undefined)?.lastNodeError ?? error;
}

function isConnectionClosed(error: unknown): boolean {
  return error instanceof Error && error.message === 'Connection is closed.';
}
