import { Inject, Injectable } from '@nestjs/common';
import { EVENTRAIL_OPTIONS } from '../eventrail.constants';
import type { ResolvedEventrailOptions } from '../eventrail.options';
import { InvalidPublishOptionsError } from '../errors/invalid-publish-options.error';
import { PayloadTooLargeError } from '../errors/payload-too-large.error';
import { RedisUnavailableError } from '../errors/redis-unavailable.error';
import { EventrailRedis } from '../redis/eventrail-redis';
import { EventrailPipeline, eventrailPipeline } from '../scripts/scripts';
import { encodeFields } from './codec';
import { newEventId } from './event-id';
import { partitionForKey } from './partitioner';
import { validateEventName, validateHeaders, validateJsonData } from './validate-event';

export interface PublishOptions {
  /** Ordering key: events with the same key go to the same partition and are handled in publish order. */
  key?: string;
  /** Headers such as `traceparent`; string values only. */
  headers?: Record<string, string>;
  /** Event id to use instead of a fresh UUIDv7 (for example an outbox row id). */
  id?: string;
  /** Partition of a keyless event. @default 0 */
  partition?: number;
}

export interface PublishInput<T = unknown> extends PublishOptions {
  event: string;
  data: T;
}

export interface PublishResult {
  /** Event id. */
  id: string;
  partition: number;
  /** Stream id of the entry: its position in the partition. */
  offset: string;
  /**
   * True when producer dedup (`dedupWindowMs`) found this event id already
   * appended within the window: nothing was appended, `offset` is the first append's.
   */
  duplicate?: boolean;
}

const MAX_ID_LENGTH = 200;
const MAX_KEY_LENGTH = 1024;

interface Prepared {
  partition: number;
  id: string;
  fields: string[];
  /** Appended through the dedup script: the caller chose the id and dedup is on. */
  dedup: boolean;
}

/**
 * Appends events to the log. Everything is validated before anything is sent,
 * so a refused call appends nothing.
 */
@Injectable()
export class EventrailPublisher {
  constructor(
    private readonly redis: EventrailRedis,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: ResolvedEventrailOptions,
  ) {}

  /** Appends one event. Resolves once Redis has appended it. */
  async publish<T>(event: string, data: T, options: PublishOptions = {}): Promise<PublishResult> {
    const prepared = this.prepare(event, data, options, Date.now());
    this.assertReady();
    try {
      if (prepared.dedup) {
        const { keys, client } = this.redis;
        const [offset, duplicate] = await client.eventrailPublishDedup(
          keys.dedup(prepared.partition, prepared.id),
          keys.stream(prepared.partition),
          this.options.dedupWindowMs,
          ...prepared.fields,
        );
        return { id: prepared.id, partition: prepared.partition, offset, duplicate: duplicate === 1 };
      }
      const offset = await this.redis.client.xadd(this.redis.keys.stream(prepared.partition), '*', ...prepared.fields);
      return { id: prepared.id, partition: prepared.partition, offset: offset as string };
    } catch (error) {
      throw new RedisUnavailableError(`publish of "${event}" failed, the event was not appended`, error);
    }
  }

  /**
   * Appends many events in one pipeline. Order is kept per partition. Not
   * atomic: if Redis fails midway, the call rejects and some events may have
   * been appended (the error lists how many).
   */
  async publishMany(events: ReadonlyArray<PublishInput>): Promise<PublishResult[]> {
    if (!Array.isArray(events)) throw new InvalidPublishOptionsError('(batch)', 'events', 'must be an array');
    const now = Date.now();
    const prepared = events.map((input) => this.prepare(input?.event, input?.data, input ?? {}, now));
    if (prepared.length === 0) return [];
    this.assertReady();
    let replies: Array<[Error | null, unknown]>;
    try {
      replies = await this.append(prepared);
    } catch (error) {
      throw new RedisUnavailableError(`publishMany of ${prepared.length} events failed`, error);
    }
    const results: PublishResult[] = new Array(prepared.length);
    let failed: Error | undefined;
    let appended = 0;
    for (let i = 0; i < prepared.length; i++) {
      const [error, reply] = replies[i] ?? [new Error('no reply'), null];
      if (error) failed ??= error;
      else appended++;
      const { id, partition, dedup } = prepared[i];
      if (dedup && Array.isArray(reply)) results[i] = { id, partition, offset: reply[0] as string, duplicate: reply[1] === 1 };
      else results[i] = { id, partition, offset: reply as string };
    }
    if (failed) {
      throw new RedisUnavailableError(`publishMany: ${prepared.length - appended} of ${prepared.length} events were not appended`, failed);
    }
    return results;
  }

  /**
   * Sends the appends as one pipeline, which keeps their order. On a cluster a
   * pipeline may only touch one slot, so there it is one pipeline per
   * partition, sent together; order within a partition is what is promised.
   */
  private async append(prepared: Prepared[]): Promise<Array<[Error | null, unknown]>> {
    const { client } = this.redis;
    if (!this.redis.isCluster) return (await this.queue(eventrailPipeline(client), prepared).exec()) ?? [];
    const byPartition = new Map<number, number[]>();
    prepared.forEach((p, i) => {
      const indexes = byPartition.get(p.partition);
      if (indexes) indexes.push(i);
      else byPartition.set(p.partition, [i]);
    });
    const replies: Array<[Error | null, unknown]> = new Array(prepared.length);
    await Promise.all(
      [...byPartition.values()].map(async (indexes) => {
        const partReplies =
          (await this.queue(
            eventrailPipeline(client),
            indexes.map((i) => prepared[i]),
          ).exec()) ?? [];
        indexes.forEach((index, j) => (replies[index] = partReplies[j] ?? [new Error('no reply'), null]));
      }),
    );
    return replies;
  }

  private queue(pipeline: EventrailPipeline, prepared: Prepared[]): EventrailPipeline {
    const { keys } = this.redis;
    for (const p of prepared) {
      if (p.dedup)
        pipeline.eventrailPublishDedup(keys.dedup(p.partition, p.id), keys.stream(p.partition), this.options.dedupWindowMs, ...p.fields);
      else pipeline.xadd(keys.stream(p.partition), '*', ...p.fields);
    }
    return pipeline;
  }

  private prepare(event: string, data: unknown, options: PublishOptions, now: number): Prepared {
    validateEventName(event);
    if (options === null || typeof options !== 'object') {
      throw new InvalidPublishOptionsError(event, 'options', 'must be an object');
    }
    validateJsonData(event, data);
    const json = JSON.stringify(data);
    const max = this.options.maxPayloadBytes;
    // A UTF-16 length of a third of the limit cannot exceed it in UTF-8: skip the byte count then.
    if (json.length * 3 > max) {
      const bytes = Buffer.byteLength(json, 'utf8');
      if (bytes > max) throw new PayloadTooLargeError(event, bytes, max);
    }
    const { key, headers, id } = options;
    let headersJson: string | undefined;
    if (headers !== undefined) {
      validateHeaders(event, headers);
      if (Object.keys(headers).length > 0) headersJson = JSON.stringify(headers);
    }
    if (key !== undefined && (typeof key !== 'string' || key.length === 0 || key.length > MAX_KEY_LENGTH)) {
      throw new InvalidPublishOptionsError(event, 'key', `must be a non-empty string of at most ${MAX_KEY_LENGTH} characters`);
    }
    if (id !== undefined && (typeof id !== 'string' || id.length === 0 || id.length > MAX_ID_LENGTH)) {
      throw new InvalidPublishOptionsError(event, 'id', `must be a non-empty string of at most ${MAX_ID_LENGTH} characters`);
    }
    const partition = this.partitionOf(event, key, options.partition);
    const eventId = id ?? newEventId(now);
    const fields = encodeFields({ id: eventId, event, key, time: now, data: json, headers: headersJson });
    return { partition, id: eventId, fields, dedup: id !== undefined && this.options.dedupWindowMs > 0 };
  }

  private partitionOf(event: string, key: string | undefined, partition: number | undefined): number {
    const partitions = this.options.partitions;
    if (partition === undefined) return key === undefined ? 0 : partitionForKey(key, partitions);
    if (key !== undefined) {
      throw new InvalidPublishOptionsError(event, 'partition', 'cannot be combined with key (the key picks the partition)');
    }
    if (!Number.isInteger(partition) || partition < 0 || partition >= partitions) {
      throw new InvalidPublishOptionsError(event, 'partition', `must be an integer from 0 to ${partitions - 1}, got ${String(partition)}`);
    }
    return partition;
  }

  private assertReady(): void {
    if (!this.redis.isReady()) {
      throw new RedisUnavailableError('the connection is not ready, the event was not appended');
    }
  }
}
