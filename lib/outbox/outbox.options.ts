import type { ModuleMetadata } from '@nestjs/common';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { checkBoolean, checkInteger, checkObject, rejectUnknownKeys } from '../config/option-checks';
import type { OutboxConnector } from './connectors/outbox-connector';

export interface OutboxRelayOptions {
  /** Run the relay in this process (one instance per log and table is active at a time; the others stand by). @default true */
  enabled?: boolean;
  /** Rows read and appended per round trip. @default 500 */
  batchSize?: number;
  /**
   * Bytes of `data` and `headers` read per batch: a batch ends before the row that would pass it (its
   * first row is always read). A row over both this and the log's `maxPayloadBytes` (or over 256 MiB)
   * is not read at all: it is marked failed. @default 16777216 (16 MiB)
   */
  maxBatchBytes?: number;
  /** How often the relay looks for rows when no NOTIFY woke it (a missed notification, a connector that cannot listen). @default 5000 */
  pollIntervalMs?: number;
  /** First wait after a failure (Redis or the database down), doubling with jitter. @default 100 */
  retryBackoffMs?: number;
  /** Cap of that wait. @default 5000 */
  retryBackoffMaxMs?: number;
}

export interface InboxOptions {
  /** How long an inbox row is kept: a redelivery of the event after that runs the work again. @default 604800000 (7 days) */
  retentionMs?: number;
  /** How often this process deletes inbox rows older than `retentionMs`; 0 turns pruning off here. @default 3600000 (1 h) */
  pruneIntervalMs?: number;
}

export interface EventrailOutboxModuleOptions {
  /** How to reach the database through the app's library: `pgConnector(pool)`, `typeormConnector(dataSource)`, ... */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- each connector has its library's transaction type
  connector: OutboxConnector<any>;
  relay?: OutboxRelayOptions;
  inbox?: InboxOptions;
  /** Create the tables, trigger and index at startup (idempotent); else run `eventrail outbox migrate`. @default false */
  ensureSchema?: boolean;
  /** Outbox table, `name` or `schema.name` (lower case letters, digits and `_`). @default 'eventrail_outbox' */
  outboxTable?: string;
  /** Inbox table. @default 'eventrail_inbox' */
  inboxTable?: string;
  /**
   * Serialise transactions that publish the same key (or keyless events to the same partition) with a
   * transaction advisory lock, so the relay's `id` order is their commit order. Off, two concurrent
   * transactions may reach the log in insert order rather than commit order. @default true
   */
  keyLocks?: boolean;
  /** Register the module globally. @default true */
  isGlobal?: boolean;
}

export interface EventrailOutboxModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  inject?: Array<string | symbol | (abstract new (...args: never[]) => unknown)>;
  useFactory: (...args: never[]) => EventrailOutboxModuleOptions | Promise<EventrailOutboxModuleOptions>;
  /** @default true */
  isGlobal?: boolean;
}

export interface ResolvedOutboxOptions {
  connector: OutboxConnector<unknown>;
  relay: Required<OutboxRelayOptions>;
  inbox: Required<InboxOptions>;
  ensureSchema: boolean;
  outboxTable: string;
  inboxTable: string;
  keyLocks: boolean;
}

export const OUTBOX_DEFAULTS = {
  relay: {
    enabled: true,
    batchSize: 500,
    maxBatchBytes: 16 * 1024 * 1024,
    pollIntervalMs: 5_000,
    retryBackoffMs: 100,
    retryBackoffMaxMs: 5_000,
  },
  inbox: { retentionMs: 7 * 86_400_000, pruneIntervalMs: 3_600_000 },
  ensureSchema: false,
  outboxTable: 'eventrail_outbox',
  inboxTable: 'eventrail_inbox',
  keyLocks: true,
} as const;

export const OPTION_NAMES = ['connector', 'relay', 'inbox', 'ensureSchema', 'outboxTable', 'inboxTable', 'keyLocks', 'isGlobal'];
export const RELAY_OPTION_NAMES = ['enabled', 'batchSize', 'maxBatchBytes', 'pollIntervalMs', 'retryBackoffMs', 'retryBackoffMaxMs'];
export const INBOX_OPTION_NAMES = ['retentionMs', 'pruneIntervalMs'];
/**
 * The most the relay reads of one row. The driver turns a row's text into JavaScript strings, and V8
 * refuses strings over about 512 MiB (inside the driver's parser, where nothing can catch it).
 */
export const MAX_ROW_READ_BYTES = 256 * 1024 * 1024;
/** Unquoted PostgreSQL identifiers, optionally schema-qualified: nothing to escape, and what `\d` shows. */
const TABLE_PATTERN = /^[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?$/;

/** Applies the defaults once and validates every option, naming the one that is wrong. */
export function resolveOutboxOptions(options: EventrailOutboxModuleOptions): ResolvedOutboxOptions {
  checkObject('outbox', options, 'an object: { connector, relay?, inbox?, ... }');
  rejectUnknownKeys('outbox', options, OPTION_NAMES);
  const connector = options.connector as unknown;
  checkObject('outbox.connector', connector, 'a connector: pgConnector(pool), typeormConnector(dataSource), ...');
  for (const method of ['execute', 'transaction', 'query', 'session'] as const) {
    if (typeof (connector as Record<string, unknown>)[method] !== 'function') {
      throw new InvalidOptionError('outbox.connector', connector, `a connector with a ${method}() method: pgConnector(pool), ...`);
    }
  }
  const relay = options.relay ?? {};
  checkObject('outbox.relay', relay, 'an object: { enabled?, batchSize?, ... }');
  rejectUnknownKeys('outbox.relay', relay, RELAY_OPTION_NAMES);
  const inbox = options.inbox ?? {};
  checkObject('outbox.inbox', inbox, 'an object: { retentionMs?, pruneIntervalMs? }');
  rejectUnknownKeys('outbox.inbox', inbox, INBOX_OPTION_NAMES);
  const d = OUTBOX_DEFAULTS;
  const retryBackoffMs = checkInteger('outbox.relay.retryBackoffMs', relay.retryBackoffMs ?? d.relay.retryBackoffMs, 1, 600_000);
  const resolved: ResolvedOutboxOptions = {
    connector: connector as OutboxConnector<unknown>,
    relay: {
      enabled: checkBoolean('outbox.relay.enabled', relay.enabled ?? d.relay.enabled),
      batchSize: checkInteger('outbox.relay.batchSize', relay.batchSize ?? d.relay.batchSize, 1, 10_000),
      maxBatchBytes: checkInteger('outbox.relay.maxBatchBytes', relay.maxBatchBytes ?? d.relay.maxBatchBytes, 1024, MAX_ROW_READ_BYTES),
      pollIntervalMs: checkInteger('outbox.relay.pollIntervalMs', relay.pollIntervalMs ?? d.relay.pollIntervalMs, 10, 3_600_000),
      retryBackoffMs,
      retryBackoffMaxMs: checkInteger(
        'outbox.relay.retryBackoffMaxMs',
        relay.retryBackoffMaxMs ?? Math.max(d.relay.retryBackoffMaxMs, retryBackoffMs),
        retryBackoffMs,
        3_600_000,
        `an integer from outbox.relay.retryBackoffMs (${retryBackoffMs}) to 3600000`,
      ),
    },
    inbox: {
      retentionMs: checkInteger('outbox.inbox.retentionMs', inbox.retentionMs ?? d.inbox.retentionMs, 60_000, 3650 * 86_400_000),
      pruneIntervalMs: checkInteger('outbox.inbox.pruneIntervalMs', inbox.pruneIntervalMs ?? d.inbox.pruneIntervalMs, 0, 86_400_000),
    },
    ensureSchema: checkBoolean('outbox.ensureSchema', options.ensureSchema ?? d.ensureSchema),
    outboxTable: checkTable('outbox.outboxTable', options.outboxTable ?? d.outboxTable),
    inboxTable: checkTable('outbox.inboxTable', options.inboxTable ?? d.inboxTable),
    keyLocks: checkBoolean('outbox.keyLocks', options.keyLocks ?? d.keyLocks),
  };
  if (resolved.outboxTable === resolved.inboxTable) {
    throw new InvalidOptionError('outbox.inboxTable', resolved.inboxTable, 'a table other than outbox.outboxTable');
  }
  return resolved;
}

export function checkTable(path: string, value: unknown): string {
  if (typeof value !== 'string' || !TABLE_PATTERN.test(value)) {
    throw new InvalidOptionError(
      path,
      value,
      'a table name, optionally schema-qualified: lower case letters, digits and _ (my_schema.my_table)',
    );
  }
  return value;
}
