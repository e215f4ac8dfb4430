import type { EventrailRedis } from '../redis/eventrail-redis';
import { describeError } from '../util/describe-error';
import type { LogStats, NodeStatus, PartitionLogStats } from './admin.types';
import { mapReply } from '../redis/map-reply';

/** Where the log lives and how big it is: nodes and their partitions, partition lengths and ids, Redis memory. */
export class LogStatsReader {
  constructor(
    private readonly redis: EventrailRedis,
    private readonly prefix: string,
  ) {}

  /**
   * Which Redis primary holds which partitions. On Redis Cluster, from
   * `CLUSTER SLOTS` and each partition's key slot; on a single Redis (or the
   * primary Sentinel points at), one node with every partition and the
   * replicas `ROLE` names.
   */
  async nodes(): Promise<NodeStatus[]> {
    const { client, keys } = this.redis;
    const all = keys.streams.map((_, p) => p);
    if (!this.redis.isCluster) {
      const { node, replicas } = await this.redis.replication();
      return [{ node, replicas, slots: [[0, 16383]], partitions: all }];
    }
    type SlotRange = [number, number, [string, number, ...unknown[]], ...Array<[string, number, ...unknown[]]>];
    const [ranges, partitionSlots] = await Promise.all([
      client.cluster('SLOTS') as unknown as Promise<SlotRange[]>,
      Promise.all(keys.streams.map((stream) => client.cluster('KEYSLOT', stream) as unknown as Promise<number>)),
    ]);
    const nodes = new Map<string, NodeStatus>();
    for (const [from, to, [host, port], ...replicas] of ranges) {
      const name = `${host}:${port}`;
      const node = nodes.get(name) ?? { node: name, replicas: [], slots: [], partitions: [] };
      node.slots.push([from, to]);
      for (const [replicaHost, replicaPort] of replicas) {
        const replica = `${replicaHost}:${replicaPort}`;
        if (!node.replicas.includes(replica)) node.replicas.push(replica);
      }
      node.partitions.push(...all.filter((p) => partitionSlots[p] >= from && partitionSlots[p] <= to));
      nodes.set(name, node);
    }
    return [...nodes.values()]
      .map((n) => ({ ...n, partitions: n.partitions.sort((a, b) => a - b) }))
      .sort((a, b) => a.node.localeCompare(b.node));
  }

  /** Length, first/last id and entries ever added of every partition, and Redis memory when INFO is allowed. */
  async stats(): Promise<LogStats> {
    const { keys, client } = this.redis;
    const partitions: PartitionLogStats[] = await Promise.all(
      keys.streams.map((stream, partition) => this.partitionStats(stream, partition)),
    );
    const usedMemoryBytes = this.redis.isCluster
      ? await client.info('memory').then(
          (info) => Number(/used_memory:(\d+)/.exec(info)?.[1] ?? NaN) || null,
          () => null, // INFO disabled
        )
      : await this.redis.usedMemoryBytes(); // a refused INFO is not asked again
    return { prefix: this.prefix, partitions, usedMemoryBytes };
  }

  private async partitionStats(stream: string, partition: number): Promise<PartitionLogStats> {
    let reply: unknown;
    try {
      reply = await this.redis.client.xinfo('STREAM', stream);
    } catch (error) {
      // A partition nobody published to yet has no stream key.
      if (/no such key/i.test(describeError(error))) return { partition, length: 0, firstId: null, lastId: null, entriesAdded: 0 };
      throw error;
    }
    const info = mapReply(reply);
    const idOf = (entry: unknown): string | null => (Array.isArray(entry) ? String(entry[0]) : null);
    const added = info.get('entries-added'); // Redis 7.0 and later
    return {
      partition,
      length: Number(info.get('length') ?? 0),
      firstId: idOf(info.get('first-entry')),
      lastId: idOf(info.get('last-entry')),
      entriesAdded: added === undefined ? null : Number(added),
    };
  }
}
