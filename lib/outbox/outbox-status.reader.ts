import type { Row } from './connectors/outbox-connector';
import { qualified } from './outbox-schema';

/** How far the relay is behind, read from the outbox table. */
export interface OutboxStatus {
  table: string;
  /** Rows waiting to be appended (not `failed`). */
  depth: number;
  /** Rows the relay could not append and skipped (see their `failed` column). */
  failed: number;
  /** Age of the oldest waiting row, on the database clock; null when none waits. */
  oldestAgeMs: number | null;
}

/**
 * One scan of the table (a `count(*)`): cheap while the relay keeps it near
 * empty, which is when it matters. Shared by `EventrailOutboxAdmin` and `eventrail outbox status`.
 */
export async function readOutboxStatus(
  query: (sql: string, params?: readonly unknown[]) => Promise<Row[]>,
  table: string,
): Promise<OutboxStatus> {
  const [row] = await query(
    `select count(*) filter (where failed is null) as depth, count(*) filter (where failed is not null) as failed,
       (extract(epoch from now() - min(created_at) filter (where failed is null)) * 1000)::float8 as oldest_ms
     from ${qualified(table)}`,
  );
  const oldest = row?.oldest_ms;
  return {
    table,
    depth: Number(row?.depth ?? 0),
    failed: Number(row?.failed ?? 0),
    oldestAgeMs: oldest === null || oldest === undefined ? null : Math.max(0, Math.round(Number(oldest))),
  };
}
