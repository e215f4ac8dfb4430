import type { Cluster, Redis } from 'ioredis';
import { EventrailKeys } from './keys';

/**
 * The partition count recorded by the log at `prefix`, or null when no log
 * exists there. Tools that attach to an existing log (the CLI) read it first,
 * since the module refuses a count that differs from the log's.
 */
export async function readLogPartitions(client: Redis | Cluster, prefix: string): Promise<number | null> {
  const recorded = await client.hget(new EventrailKeys(prefix, 1).meta, 'partitions');
  if (recorded === null) return null;
  const partitions = Number(recorded);
  return Number.isInteger(partitions) && partitions > 0 ? partitions : null;
}
