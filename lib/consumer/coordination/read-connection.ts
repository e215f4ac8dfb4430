import type { Cluster, Redis } from 'ioredis';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import { describeError } from '../../util/describe-error';
import { withTimeout } from '../../util/timeout';

/** A partition's blocking read connection, answering; or why it could not be opened. */
export type ReadConnection = { connection: Redis | Cluster } | { refused: string };

/**
 * Opens the connection a partition's worker reads on (a blocking XREAD needs
 * its own) and waits for Redis to answer a PING on it, before the worker
 * starts: a lease whose partition cannot be read must not be held, or the
 * partition waits with lag while no other member may take it. At
 * `maxclients` Redis refuses the connection (it accepts, answers
 * `ERR max number of clients reached` and closes). Once per partition taken,
 * never per batch: the first read would have waited for the connection
 * anyway.
 */
export async function openReadConnection(redis: EventrailRedis, timeoutMs: number): Promise<ReadConnection> {
  const connection = redis.duplicateForReads();
  let lastError: string | undefined;
  const keep = (error: Error): void => void (lastError = error.message);
  connection.on('error', keep);
  try {
    await withTimeout(connection.ping(), timeoutMs, () => {
      throw new Error(`no answer within ${timeoutMs} ms`);
    });
    return { connection };
  } catch (error) {
    connection.disconnect();
    return { refused: await explainRefusal(redis, lastError ?? describeError(error)) };
  } finally {
    connection.off('error', keep);
  }
}

/**
 * What a refused connection says is often only `write EPIPE` or a retry
 * limit (Redis closed it before the reply was read): when Redis's own count
 * shows it at `maxclients`, that is said instead. One INFO, only when a
 * connection was refused; where INFO is refused or has no `maxclients`
 * (before Redis 7) the connection's own error is given.
 */
export async function explainRefusal(redis: EventrailRedis, error: string): Promise<string> {
  if (/max number of clients/i.test(error)) return `Redis is at maxclients (${error})`;
  try {
    const info = String(await redis.client.info('clients'));
    const connected = Number(/connected_clients:(\d+)/.exec(info)?.[1]);
    const max = Number(/maxclients:(\d+)/.exec(info)?.[1]);
    if (max > 0 && connected >= max - 1) return `Redis is at maxclients (${connected} of ${max} connections; ${error})`;
  } catch {
    // the connection's own error is all there is to say
  }
  return error;
}
