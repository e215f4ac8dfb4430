/** What `EventrailRecord` can set on an emitted event, as `publish`'s options do. */
export interface EventrailRecordOptions {
  /** Ordering key: picks the partition; events with the same key are handled in emit order. */
  key?: string;
  /** Headers (string values), such as `traceparent`. */
  headers?: Record<string, string>;
  /** Event id instead of a fresh one (with `dedupWindowMs`, repeated emits of the id append once). */
  id?: string;
}

/**
 * Data plus the key, headers and id to emit it with, as Nest's `RmqRecord`
 * and `NatsRecord` carry theirs: `client.emit('order.paid', new EventrailRecord(data, { key: orderId }))`.
 * Plain data emits a keyless event with a fresh id.
 */
export class EventrailRecord<TData = unknown> {
  constructor(
    readonly data: TData,
    readonly options: EventrailRecordOptions = {},
  ) {}
}

/** Builds an `EventrailRecord` step by step, like Nest's record builders. */
export class EventrailRecordBuilder<TData = unknown> {
  private options: EventrailRecordOptions = {};

  constructor(private data?: TData) {}

  setData(data: TData): this {
    this.data = data;
    return this;
  }

  setKey(key: string): this {
    this.options = { ...this.options, key };
    return this;
  }

  setHeaders(headers: Record<string, string>): this {
    this.options = { ...this.options, headers };
    return this;
  }

  setId(id: string): this {
    this.options = { ...this.options, id };
    return this;
  }

  build(): EventrailRecord<TData> {
    return new EventrailRecord(this.data as TData, this.options);
  }
}
