import { BaseRpcContext } from '@nestjs/microservices';
import type { EventrailMessage } from '../events/eventrail-message';

/**
 * What `@Ctx()` gives an `@EventPattern` handler on the eventrail transport:
 * the message being handled, as an `@OnEvent` handler receives it.
 */
export class EventrailContext extends BaseRpcContext<[EventrailMessage]> {
  /** The whole message: id, event, data, key, headers, partition, offset, group, attempt, publishedAt. */
  getMessage<T = unknown>(): EventrailMessage<T> {
    return this.args[0] as EventrailMessage<T>;
  }

  /** Event id. */
  getId(): string {
    return this.args[0].id;
  }

  /** Ordering key, or null for a keyless event. */
  getKey(): string | null {
    return this.args[0].key;
  }

  getPartition(): number {
    return this.args[0].partition;
  }

  /** Stream id of the entry in its partition. */
  getOffset(): string {
    return this.args[0].offset;
  }

  /** Delivery attempt in this worker, from 1. */
  getAttempt(): number {
    return this.args[0].attempt;
  }

  getHeaders(): Record<string, string> {
    return this.args[0].headers;
  }

  /** The consumer group handling it (the server's `group`). */
  getGroup(): string {
    return this.args[0].group;
  }
}
