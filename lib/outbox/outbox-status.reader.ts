import type { Row } from './connectors/outbox-connector';
import { qualified } from './outbox-schema';

/** How far the relay is behind, read from the outbox table. */
export interface OutboxStatus {
  table: string;
  /** Rows waiting to be appended (not `failed`). */
  depth: number;
  /** Rows the relay could not append and skipped (see their `failed` column). */
  failed: number;
  /** Of `depth`, rows held behind an earlier failed row of their key: they go once it is fixed or deleted. */
  held: number;
  /** Age of the oldest waiting row, on the database clock; null when none waits. */
  oldestAgeMs: number | null;
}

/**
 * One scan of the table (a `count(*)`): cheap while the relay keeps it near
 * empty, which is when it matters. Held rows are counted against the failed
 * keys' lowest ids (the partial index on failed rows finds them), so a key's
 * rows are matched once, not looked up row by row. Shared by
 * `EventrailOutboxAdmin` and `eventrail outbox status`.
 */
export async function readOutboxStatus(
  query: (sql: string, params?: readonly unknown[]) => Promise<Row[]>,
  table: string,
): Promise<OutboxStatus> {
  const [row] = await query(
    `with held as (select key, min(id) as id from ${qualified(table)} where failed is not null and key is not null group by key)
     select count(*) filter (where failed is null) as depth, count(*) filter (where failed is not null) as failed,
       (select count(*) from ${qualified(table)} r join held h on h.key = r.key and r.id > h.id where r.failed is null) as held,
       (extract(epoch from now() - min(created_at) filter (where failed is null)) * 1000)::float8 as oldest_ms
     from ${qualified(table)}`,
  );
  const oldest = row?.oldest_ms;
  return {
    table,
    depth: Number(row?.depth ?? 0),
    failed: Number(row?.failed ?? 0),
    held: Number(row?.held ?? 0),
    oldestAgeMs: oldest === null || oldest === undefined ? null : Math.max(0, Math.round(Number(oldest))),
  };
}
