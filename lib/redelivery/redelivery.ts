import type { Cluster, Redis } from 'ioredis';
import { redeliveryFields } from '../wire/codec';
import type { EventrailKeys } from '../redis/keys';
import { EventrailScripts } from '../redis/eventrail-scripts';
import type { ResolvedTracingOptions } from '../tracing/tracing.options';
import { startRedeliverySpan } from './redelivery-tracing';
import type { Redelivery, RedeliveryKind } from './redelivery.types';

export type { Redelivery } from './redelivery.types';

/**
 * Appends `items` back to the log for `group` alone: each keeps its event
 * id, key, publish time, data and headers, and carries `to: <group>`, so
 * every other group skips it. Each gets a new stream id at the end of its
 * partition. One pipeline per partition, sent together (on Redis Cluster a
 * pipeline may only touch one slot). Returns per item null when it was
 * appended, else why not. With `tracing` (and OpenTelemetry installed), in a
 * replay span whose trace context the items carry in `replaytraceparent`.
 */
export async function redeliver(
  client: Redis | Cluster,
  keys: EventrailKeys,
  group: string,
  items: readonly Redelivery[],
  tracing?: ResolvedTracingOptions,
  kind: RedeliveryKind = 'replay',
): Promise<Array<Error | null>> {
  const span = tracing ? startRedeliverySpan(tracing, keys.prefix, group, items, kind) : undefined;
  if (span) return span.track(append(client, keys, group, span.items));
  return append(client, keys, group, items);
}

async function append(
  client: Redis | Cluster,
  keys: EventrailKeys,
  group: string,
  items: readonly Redelivery[],
): Promise<Array<Error | null>> {
  const byPartition = new Map<number, number[]>();
  items.forEach(({ partition }, index) => {
    const indexes = byPartition.get(partition) ?? [];
    indexes.push(index);
    byPartition.set(partition, indexes);
  });
  const results = new Array<Error | null>(items.length).fill(null);
  const scripts = new EventrailScripts(client, keys);
  await Promise.all(
    [...byPartition].map(async ([partition, indexes]) => {
      const pipeline = client.pipeline();
      // A big entry goes through the script that also records it in the partition's index of big entries.
      for (const index of indexes) scripts.queueAppend(pipeline, partition, redeliveryFields(items[index].entry, group));
      const replies = (await pipeline.exec()) ?? [];
      indexes.forEach((index, i) => (results[index] = replies[i] ? replies[i][0] : new Error('the pipeline was not executed')));
    }),
  );
  return results;
}
