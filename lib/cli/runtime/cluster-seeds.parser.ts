import type { RedisOptions } from 'ioredis';
import { CliUsageError } from '../errors/cli-usage.error';
import { redactUrl } from '../../util/redact-url';
import { normalizeRedisUrl } from '../../redis/redis-url';

/** What ioredis's `Cluster` needs from `--redis-url` under `--cluster`. */
export interface ClusterSeeds {
  nodes: Array<{ host: string; port: number }>;
  /** Applied to every node: a cluster takes one set of credentials, and TLS on all nodes or none. */
  redisOptions: Pick<RedisOptions, 'username' | 'password' | 'tls'>;
}

interface Seed {
  host: string;
  port: number;
  tls: boolean;
  username?: string;
  password?: string;
}

// A comma ends a URL only where another URL (a scheme) or the end follows: a password may hold commas (`redis://:a,b@host`).
const SEED_SEPARATOR = /,(?=[\s,]*(?:[a-z][a-z\d+.-]*:\/\/|$))/i;

/** The URLs of a comma-separated list, blanks around them and empty items (a trailing comma) left out. */
export function splitSeeds(list: string): string[] {
  return list
    .split(SEED_SEPARATOR)
    .map((url) => url.trim())
    .filter((url) => url !== '');
}

/**
 * Parses `redis://[user:pass@]host:port,...`. Seeds without credentials take
 * those of the seeds that have them, so a password need not be repeated.
 * Messages show URLs with the password redacted.
 */
export function parseClusterSeeds(list: string): ClusterSeeds {
  const seeds = splitSeeds(list).map(parseSeed);
  if (seeds.length === 0) throw new CliUsageError('--cluster needs at least one seed node URL in --redis-url or EVENTRAIL_REDIS_URL');
  if (new Set(seeds.map((s) => s.tls)).size > 1) throw new CliUsageError('The cluster seed URLs mix redis:// and rediss://');
  const credentials = new Set(seeds.filter((s) => s.username || s.password).map((s) => `${s.username ?? ''}:${s.password ?? ''}`));
  if (credentials.size > 1)
    throw new CliUsageError('The cluster seed URLs carry different credentials; every node of a cluster takes the same');
  const withCredentials = seeds.find((s) => s.username || s.password);
  return {
    nodes: seeds.map(({ host, port }) => ({ host, port })),
    redisOptions: {
      ...(withCredentials?.username ? { username: withCredentials.username } : {}),
      ...(withCredentials?.password ? { password: withCredentials.password } : {}),
      ...(seeds[0].tls ? { tls: {} } : {}),
    },
  };
}

function parseSeed(url: string): Seed {
  let parsed: URL;
  try {
    parsed = new URL(normalizeRedisUrl(url));
  } catch {
    throw new CliUsageError(`Invalid cluster seed URL "${redactUrl(url)}": expected redis://[user:password@]host:port`);
  }
  if ((parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') || parsed.hostname === '')
    throw new CliUsageError(
      `Invalid cluster seed URL "${redactUrl(url)}": expected redis://[user:password@]host:port, rediss://, valkey:// or valkeys://`,
    );
  if (!['', '/', '/0'].includes(parsed.pathname))
    throw new CliUsageError(`Invalid cluster seed URL "${redactUrl(url)}": Redis Cluster has database 0 only`);
  return {
    // URL keeps the brackets of an IPv6 address; a socket wants the address alone.
    host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: parsed.port ? Number(parsed.port) : 6379,
    tls: parsed.protocol === 'rediss:',
    username: parsed.username ? decodeURIComponent(parsed.username) : undefined,
    password: parsed.password ? decodeURIComponent(parsed.password) : undefined,
  };
}
