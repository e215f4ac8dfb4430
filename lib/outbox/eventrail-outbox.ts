import { Inject, Injectable } from '@nestjs/common';
import { EventrailError } from '../errors/eventrail.error';
import { InvalidEventDataError } from '../errors/invalid-event-data.error';
import { InvalidPublishOptionsError } from '../errors/invalid-publish-options.error';
import { newEventId } from '../wire/event-id';
import type { EventRef } from '../events/event-definition';
import { publishedEventNames } from '../events/published-event';
import { EventrailPublisher, type PublishedData } from '../publisher/eventrail.publisher';
import { describeError } from '../util/describe-error';
import { EVENTRAIL_OPTIONS } from '../config/eventrail.constants';
import type { ResolvedLogOptions } from '../config/log.options';
import { EVENTRAIL_OUTBOX_OPTIONS } from './outbox.constants';
import type { ResolvedOutboxOptions } from './outbox.options';
import { KEY_LOCK_NAMESPACE, qualified } from './outbox-schema';
import { rethrowMissingTable } from './missing-table';

/** What `publish` takes besides the event and its data (everything `EventrailPublisher.publish` takes but `durability`). */
export interface OutboxPublishOptions {
  /** Ordering key: rows with the same key reach the log in commit order and go to the same partition. */
  key?: string;
  headers?: Record<string, string>;
  /** Event id; default a fresh UUIDv7. The relay appends the row with it, and producer dedup absorbs a repeat. */
  id?: string;
  /** Partition of a keyless event. @default 0 */
  partition?: number;
}

export interface OutboxPublishInput<T = unknown> extends OutboxPublishOptions {
  /** The event name, or a `defineEvent` definition whose schema checks `data` first, as `publish` does. */
  event: EventRef;
  data: T;
}

/** A staged event: it reaches the log after the transaction commits. */
export interface OutboxRecord {
  /** Event id, as consumers will see it (`message.id`). */
  id: string;
  /** Partition the relay will append it to. */
  partition: number;
  /** The outbox row's id (its place in the relay's order). */
  rowId: string;
}

interface StagedRow {
  eventId: string;
  event: string;
  key: string | null;
  partition: number | null;
  data: string;
  headers: string | null;
  /** Transaction advisory lock that orders this row among its key's (or its partition's keyless) rows. */
  lock: string;
  target: number;
}

/**
 * Stages events in the caller's database transaction. Each event is checked
 * exactly as `EventrailPublisher.publish` checks it (same typed errors) and
 * becomes one row; nothing here touches Redis. The relay appends committed rows.
 */
@Injectable()
export class EventrailOutbox {
  constructor(
    @Inject(EVENTRAIL_OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    private readonly publisher: EventrailPublisher,
    @Inject(EVENTRAIL_OPTIONS) private readonly eventrail: Pick<ResolvedLogOptions, 'prefix'>,
  ) {}

  /**
   * Inserts one row in `tx`, the connector's transaction handle (a `PoolClient` inside `BEGIN`, an
   * `EntityManager`, a Kysely `Transaction`, a Drizzle `tx`). Publish last in the transaction: with
   * `keyLocks`, a second transaction publishing the same key waits here until this one ends.
   */
  async publish<T>(tx: unknown, event: string, data: T, options?: OutboxPublishOptions): Promise<OutboxRecord>;
  /** A `defineEvent` definition: `data` is typed by its schema's input and checked by it before the row is written. */
  async publish<E extends EventRef>(tx: unknown, event: E, data: PublishedData<E>, options?: OutboxPublishOptions): Promise<OutboxRecord>;
  async publish(tx: unknown, event: EventRef, data: unknown, options: OutboxPublishOptions = {}): Promise<OutboxRecord> {
    return (await this.publishMany(tx, [{ ...(options ?? {}), event, data }]))[0];
  }

  /** Inserts one row per event in `tx`, in one statement, in the order given. */
  async publishMany(tx: unknown, events: ReadonlyArray<OutboxPublishInput>): Promise<OutboxRecord[]> {
    if (!Array.isArray(events)) throw new InvalidPublishOptionsError('(batch)', 'events', 'must be an array');
    // Typed events: every definition's schema checks its data first (EventValidationError, as publishMany throws).
    const named = publishedEventNames(events);
    const names = Array.isArray(named) ? named : await named;
    const now = Date.now();
    const rows = events.map((input, i) => this.stage({ ...(input ?? {}), event: names[i] } as OutboxPublishInput & { event: string }, now));
    if (rows.length === 0) return [];
    const { connector, outboxTable, keyLocks } = this.options;
    const params: unknown[] = [];
    const column = (pick: (row: StagedRow) => unknown): unknown[] => rows.map(pick);
    if (keyLocks) params.push(column((r) => `${outboxTable}|${r.lock}`));
    params.push(
      this.eventrail.prefix,
      column((r) => r.eventId),
      column((r) => r.event),
      column((r) => r.key),
      column((r) => r.partition),
      column((r) => r.data),
      column((r) => r.headers),
    );
    let inserted: Array<Record<string, unknown>>;
    try {
      inserted = await connector.execute(tx, insertSql(outboxTable, keyLocks), params);
    } catch (error) {
      rethrowMissingTable(error, outboxTable);
    }
    return rows.map((row, i) => ({ id: row.eventId, partition: row.target, rowId: String(inserted[i]?.id) }));
  }

  private stage(input: OutboxPublishInput & { event: string }, now: number): StagedRow {
    const { event, data, key, headers, id, partition } = input;
    const options = { key, headers, id, partition };
    const target = this.publisher.check(event, data, options).partition;
    const headersJson = headers !== undefined && Object.keys(headers).length > 0 ? json(event, headers) : null;
    return {
      eventId: id ?? newEventId(now),
      event,
      key: key ?? null,
      partition: key === undefined && partition !== undefined ? partition : null,
      data: json(event, data),
      headers: headersJson,
      lock: key !== undefined ? `k:${key}` : `p:${target}`,
      target,
    };
  }
}

/** JSON of a value the publisher's checks passed; a getter that throws only now is still bad input. */
function json(event: string, value: unknown): string {
  try {
    return JSON.stringify(value);
  } catch (error) {
    if (error instanceof EventrailError) throw error;
    throw new InvalidEventDataError(event, 'data', `cannot be serialised (${describeError(error)})`);
  }
}

/**
 * One multi-row insert from arrays (one parameter per column, whatever the
 * batch size), each row marked with the log it belongs to. With key locks, a CTE first takes a transaction advisory lock
 * per distinct key, in hash order so two batches never deadlock on each other;
 * the `where` makes the insert wait for it. The lock is held until commit, so
 * same-key rows get their ids in commit order.
 */
function insertSql(table: string, keyLocks: boolean): string {
  const n = keyLocks ? 1 : 0;
  const locks = keyLocks
    ? `with locks as (
  select pg_advisory_xact_lock(${KEY_LOCK_NAMESPACE}, h)
  from (select distinct hashtext(l) as h from unnest($1::text[]) as l order by h) as ordered
)
`
    : '';
  return `${locks}insert into ${qualified(table)} (event_id, event, key, partition, data, headers, log)
select u.event_id, u.event, u.key, u.partition, u.data, u.headers, $${n + 1}::text
from unnest($${n + 2}::text[], $${n + 3}::text[], $${n + 4}::text[], $${n + 5}::int[], $${n + 6}::text[], $${n + 7}::text[])
  with ordinality as u(event_id, event, key, partition, data, headers, n)
${keyLocks ? 'where (select count(*) from locks) >= 0\n' : ''}order by u.n
returning id`;
}
