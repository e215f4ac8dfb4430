import type { Row } from './connectors/outbox-connector';
import { ownsUnlabelledSql, qualified } from './outbox-schema';

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
 * rows are matched once, not looked up row by row. With `log`, only that log's
 * rows count (and the rows without a log, when that log owns them: the `log`
 * column's default names it), as its relay sees the table; without, every row.
 * Shared by `EventrailOutboxAdmin` and `eventrail outbox status`.
 */
export async function readOutboxStatus(
  query: (sql: string, params?: readonly unknown[]) => Promise<Row[]>,
  table: string,
  log?: string,
): Promise<OutboxStatus> {
  const rows = log === undefined ? qualified(table) : `(select * from ${qualified(table)} where ${ofLog(table, '$1', '$2')})`;
  const [row] = await query(
    `with t as (select id, key, failed, created_at from ${rows} t),
     held as (select key, min(id) as id from t where failed is not null and key is not null group by key)
     select count(*) filter (where failed is null) as depth, count(*) filter (where failed is not null) as failed,
       (select count(*) from t r join held h on h.key = r.key and r.id > h.id where r.failed is null) as held,
       (extract(epoch from now() - min(created_at) filter (where failed is null)) * 1000)::float8 as oldest_ms
     from t`,
    log === undefined ? [] : [log, log],
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

/**
 * SQL that is true for a row of the log `prefix` names (an SQL expression, a placeholder, given twice,
 * each used once): its own rows, and the rows without a log when it owns them.
 */
function ofLog(table: string, prefix: string, again: string, alias = ''): string {
  return `(${alias}log = ${prefix} or (${alias}log is null and ${ownsUnlabelledSql(table, again)}))`;
}
