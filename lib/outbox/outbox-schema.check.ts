import type { Row } from './connectors/outbox-connector';
import { OutboxSchemaMismatchError } from './errors/outbox-schema-mismatch.error';
import { qualified, type OutboxTables } from './outbox-schema';

interface ColumnShape {
  type: string;
  notNull: boolean;
}

/** The columns the outbox reads and writes, as `format_type` names them. */
const OUTBOX_COLUMNS: Record<string, ColumnShape> = {
  id: { type: 'bigint', notNull: true },
  event_id: { type: 'text', notNull: true },
  event: { type: 'text', notNull: true },
  key: { type: 'text', notNull: false },
  partition: { type: 'integer', notNull: false },
  data: { type: 'text', notNull: true },
  headers: { type: 'text', notNull: false },
  created_at: { type: 'timestamp with time zone', notNull: true },
  failed: { type: 'text', notNull: false },
  log: { type: 'text', notNull: false },
};
const INBOX_COLUMNS: Record<string, ColumnShape> = {
  group_name: { type: 'text', notNull: true },
  event_id: { type: 'text', notNull: true },
  handled_at: { type: 'timestamp with time zone', notNull: true },
};

type Query = (sql: string, params?: readonly unknown[]) => Promise<Row[]>;

/**
 * Compares the existing tables with what the outbox needs and throws `OutboxSchemaMismatchError` naming
 * every difference: a missing column, another type, a column that may not be null where the outbox
 * writes none, a required column the outbox does not know (its inserts would fail), and for the inbox a
 * primary key other than `(group_name, event_id)` (keyed on the event alone, a second group would find
 * the first's row and skip its work). A table that does not exist is left to `OutboxSchemaMissingError`.
 */
export async function checkOutboxSchema(query: Query, tables: OutboxTables): Promise<void> {
  await checkTable(query, tables.outbox, OUTBOX_COLUMNS, ['id']);
  await checkTable(query, tables.inbox, INBOX_COLUMNS, ['event_id', 'group_name']);
}

async function checkTable(query: Query, table: string, expected: Record<string, ColumnShape>, primaryKey: string[]): Promise<void> {
  const rows = await query(
    `select a.attname as name, format_type(a.atttypid, a.atttypmod) as type, a.attnotnull as not_null,
       a.atthasdef or a.attidentity <> '' or a.attgenerated <> '' as has_default,
       coalesce(a.attnum = any(i.indkey), false) as in_primary_key
     from pg_attribute as a
       left join pg_index as i on i.indrelid = a.attrelid and i.indisprimary
     where a.attrelid = to_regclass($1) and a.attnum > 0 and not a.attisdropped`,
    [qualified(table)],
  );
  if (rows.length === 0) return;
  const found = new Map(rows.map((row) => [String(row.name), row]));
  const differences: string[] = [];
  for (const [name, shape] of Object.entries(expected)) {
    const column = found.get(name);
    if (!column) differences.push(`column ${name} (${shape.type}) is missing`);
    else if (column.type !== shape.type) differences.push(`column ${name} is ${String(column.type)}, not ${shape.type}`);
    else if (column.not_null === true && !shape.notNull) differences.push(`column ${name} is not null, but the outbox may leave it empty`);
  }
  for (const [name, column] of found) {
    if (!(name in expected) && column.not_null === true && column.has_default !== true) {
      differences.push(`column ${name} is not null and has no default, and the outbox does not write it`);
    }
  }
  const key = rows
    .filter((row) => row.in_primary_key === true)
    .map((row) => String(row.name))
    .sort();
  if (key.join(',') !== primaryKey.join(',')) {
    differences.push(`the primary key is (${key.join(', ') || 'none'}), not (${[...primaryKey].sort().join(', ')})`);
  }
  if (differences.length > 0) throw new OutboxSchemaMismatchError(table, differences);
}
