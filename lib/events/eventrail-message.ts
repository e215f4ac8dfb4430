/** What a handler receives for one event. */
export interface EventrailMessage<T = unknown> {
  /** Event id (UUIDv7 unless the publisher chose one). */
  id: string;
  /** Event type. */
  event: string;
  data: T;
  /** Ordering key, or null for keyless events. */
  key: string | null;
  headers: Record<string, string>;
  publishedAt: Date;
  partition: number;
  /** Stream id of the entry in its partition. */
  offset: string;
  /** Consumer group handling it. */
  group: string;
  /** Delivery attempt in this worker, from 1. */
  attempt: number;
}
