import { createHash } from 'node:crypto';
import { quoteIdentifier } from './connectors/pg-session';

/** Tables of one outbox: names as given (`name` or `schema.name`), already validated. */
export interface OutboxTables {
  outbox: string;
  inbox: string;
}

/**
 * Namespaces (the first key of the two-key form) of the advisory locks the outbox takes: the second key
 * is `hashtext` of a string that names what is locked. Each kind has its own, so a 32-bit hash collision
 * can only make two locks of the same kind meet: a key whose name hashes like the relay's never waits
 * for the relay (a key lock meeting another key's only serialises two transactions).
 */
export const RELAY_LOCK_NAMESPACE = 0x45565452; // "EVTR"
/** Transaction locks on a key (or a keyless event's partition), taken by the insert. */
export const KEY_LOCK_NAMESPACE = 0x4556544b; // "EVTK"
/** The lock that serialises schema creation. */
export const SCHEMA_LOCK_NAMESPACE = 0x45565453; // "EVTS"

/** PostgreSQL's identifier limit (NAMEDATALEN - 1), which channel, trigger and index names obey too. */
const MAX_IDENTIFIER_BYTES = 63;

/** `"schema"."name"` or `"name"`. */
export function qualified(table: string): string {
  return table.split('.').map(quoteIdentifier).join('.');
}

/**
 * The NOTIFY channel of an outbox table: its name as given when that fits PostgreSQL's 63-byte limit
 * (what existing triggers send on), else a name derived from it that does.
 */
export function notifyChannel(table: string): string {
  return shortName(table);
}

/** `name` when it fits in an identifier; else its first characters and a hash of the whole, 63 bytes. */
export function shortName(name: string): string {
  if (Buffer.byteLength(name) <= MAX_IDENTIFIER_BYTES) return name;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 16);
  return `${name.slice(0, MAX_IDENTIFIER_BYTES - hash.length - 1)}_${hash}`;
}

/**
 * The DDL, idempotent (`if not exists`, `or replace`), as one script: what
 * `eventrail outbox migrate` runs and prints, and what `ensureSchema` runs at
 * startup. Needs PostgreSQL 14 or later (`create or replace trigger`).
 *
 * - `id` orders the rows: the relay appends them in `id` order. Two
 *   transactions that publish the same key are serialised by a transaction
 *   advisory lock on the key, taken in the insert, so their ids are also in
 *   commit order (see eventrail-outbox.ts).
 * - `data` and `headers` keep the JSON text that was validated, byte for byte
 *   (`jsonb` would reorder keys).
 * - `failed` is set when the relay cannot append a row (it no longer passes the
 *   publisher's checks, say `partitions` changed); such rows stay, are counted
 *   and skipped.
 * - `log` is the prefix of the log the row belongs to: a relay takes only its own log's rows, so two
 *   logs can share a table. Rows without one (written before the column existed, or by hand) belong to
 *   the log the column's default names, if any (see `ownsUnlabelledSql`): with `ensureSchema`, the
 *   first log set up on the table (`migrationSql` with `owner`).
 * - A partial index finds a key's failed rows: the relay holds a key's later rows behind one.
 * - A statement trigger sends one `NOTIFY` per insert statement; PostgreSQL
 *   delivers it at commit, which is when the relay should look.
 */
export function schemaSql(tables: OutboxTables): string {
  const outbox = qualified(tables.outbox);
  const inbox = qualified(tables.inbox);
  const base = tables.outbox.split('.').pop() as string;
  const inboxBase = tables.inbox.split('.').pop() as string;
  const schema = tables.outbox.includes('.') ? `${quoteIdentifier(tables.outbox.split('.')[0])}.` : '';
  const notifyFunction = `${schema}${quoteIdentifier(shortName(`${base}_notify`))}`;
  return `create table if not exists ${outbox} (
  id bigserial primary key,
  event_id text not null,
  event text not null,
  key text,
  partition integer,
  data text not null,
  headers text,
  created_at timestamptz not null default now(),
  failed text,
  log text
);
alter table ${outbox} add column if not exists log text;
create index if not exists ${quoteIdentifier(shortName(`${base}_failed_keys`))} on ${outbox} (key, id) where failed is not null;
create or replace function ${notifyFunction}() returns trigger language plpgsql as $$
begin
  perform pg_notify(TG_ARGV[0], '');
  return null;
end $$;
create or replace trigger ${quoteIdentifier(shortName(`${base}_notify`))} after insert on ${outbox}
  for each statement execute function ${notifyFunction}('${notifyChannel(tables.outbox).replace(/'/g, "''")}');
create table if not exists ${inbox} (
  group_name text not null,
  event_id text not null,
  handled_at timestamptz not null default now(),
  primary key (group_name, event_id)
);
create index if not exists ${quoteIdentifier(shortName(`${inboxBase}_handled_at`))} on ${inbox} (handled_at);
`;
}

/**
 * The DDL in one transaction behind an advisory lock, so processes that start
 * together do not race on `create table if not exists` (which can fail on a
 * duplicate type when two run it at once).
 */
export function migrationSql(tables: OutboxTables, owner?: string): string {
  return `begin;
select pg_advisory_xact_lock(${SCHEMA_LOCK_NAMESPACE}, hashtext('schema ${tables.outbox.replace(/'/g, "''")}'));
${owner === undefined ? '' : ownerClaimSql(tables.outbox)}${schemaSql(tables)}${owner === undefined ? '' : ownerSql(tables.outbox, owner)}commit;
`;
}

/**
 * Before the DDL: whether this setup may name the owner of the rows without a log, kept for the
 * transaction. Only a setup that creates the table, or gives an older table its `log` column (its rows
 * so far are this log's), may: a table made by `eventrail outbox migrate`, or set up by logs before,
 * gets an owner only from its operator.
 */
function ownerClaimSql(table: string): string {
  return `select set_config('eventrail.owner_claim', (to_regclass('${qualified(table)}') is null or not exists (
  select 1 from pg_catalog.pg_attribute where attrelid = to_regclass('${qualified(table)}') and attname = 'log' and not attisdropped))::text, true);
`;
}

/**
 * Makes `owner` the log of rows written without one, unless the table already names a log: the `log`
 * column's default, so a hand insert that leaves the column out is that log's row from the start, and
 * the rows left without one go to that log's relay alone. Run behind the schema lock, so of two logs set
 * up on one table at once the first keeps it. A prefix is letters, digits and `.`, `_`, `:`, `-`: it is
 * written as a literal as it is.
 */
function ownerSql(table: string, owner: string): string {
  return `do $eventrail$ begin
  if current_setting('eventrail.owner_claim', true) = 'true' and not exists (select 1 from pg_catalog.pg_attrdef d join pg_catalog.pg_attribute a on a.attrelid = d.adrelid and a.attnum = d.adnum
      where d.adrelid = to_regclass('${qualified(table)}') and a.attname = 'log') then
    alter table ${qualified(table)} alter column log set default '${owner.replace(/'/g, "''")}';
  end if;
end $eventrail$;
`;
}

/**
 * SQL for the `log` column's default as PostgreSQL prints it (`'prefix'::text`), null when it has none.
 * The log it names owns the rows without a log: only its relay takes them, and only its status counts them.
 */
export function logDefaultSql(table: string): string {
  return `(select pg_get_expr(d.adbin, d.adrelid) from pg_catalog.pg_attrdef d
    join pg_catalog.pg_attribute a on a.attrelid = d.adrelid and a.attnum = d.adnum
    where d.adrelid = to_regclass('${qualified(table)}') and a.attname = 'log')`;
}

/**
 * SQL that is true when `prefix` (an SQL expression, a placeholder) is the log that owns the rows without
 * a log: the default's string literal, however it is cast (`'p'::text`, `'p'::character varying`, or not at all).
 */
export function ownsUnlabelledSql(table: string, prefix: string): string {
  return `coalesce(replace((regexp_match(${logDefaultSql(table)}, '^''((?:[^'']|'''')*)''(?:::[a-z ]+)?$'))[1], '''''', '''') = ${prefix}::text, false)`;
}
