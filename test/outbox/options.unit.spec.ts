import { InvalidOptionError } from '../../lib';
import { OUTBOX_DEFAULTS, OutboxConnector } from '../../lib/outbox';
import { resolveOutboxOptions } from '../../lib/outbox/outbox.options';
import { migrationSql, qualified, schemaSql } from '../../lib/outbox/outbox-schema';
import { sqlState } from '../../lib/outbox/missing-table';

/** A connector with the four methods; never called here. */
const connector = {
  name: 'fake',
  execute: () => Promise.resolve([]),
  transaction: () => Promise.resolve(undefined),
  query: () => Promise.resolve([]),
  session: () => Promise.reject(new Error('not here')),
} as unknown as OutboxConnector<unknown>;

describe('outbox options', () => {
  it('applies the documented defaults once', () => {
    expect(resolveOutboxOptions({ connector })).toEqual({ connector, ...OUTBOX_DEFAULTS });
  });

  it('names the option that is wrong', () => {
    const invalid = (options: object, pattern: RegExp) =>
      expect(() => resolveOutboxOptions({ connector, ...options } as never)).toThrow(
        expect.objectContaining({ message: expect.stringMatching(pattern) }),
      );
    invalid({ relay: { batchSize: 0 } }, /outbox\.relay\.batchSize: got 0/);
    invalid({ relay: { pollIntervalMs: 1 } }, /outbox\.relay\.pollIntervalMs/);
    invalid(
      { relay: { retryBackoffMs: 500, retryBackoffMaxMs: 100 } },
      /outbox\.relay\.retryBackoffMaxMs: got 100, expected an integer from outbox\.relay\.retryBackoffMs \(500\)/,
    );
    invalid({ relay: { batchsize: 10 } }, /outbox\.relay\.batchsize: got an unknown option \(did you mean batchSize\?\)/);
    invalid({ inbox: { retentionMs: 1 } }, /outbox\.inbox\.retentionMs/);
    invalid({ ensureSchema: 'yes' }, /outbox\.ensureSchema: got "yes", expected true or false/);
    invalid({ outboxTable: 'Outbox' }, /outbox\.outboxTable/);
    invalid({ outboxTable: 'a.b.c' }, /outbox\.outboxTable/);
    invalid({ outboxTable: 'x"; drop table y; --' }, /outbox\.outboxTable/);
    invalid({ inboxTable: OUTBOX_DEFAULTS.outboxTable }, /outbox\.inboxTable: .* a table other than outbox\.outboxTable/);
    invalid({ keyLock: true }, /did you mean keyLocks\?/);
    expect(() => resolveOutboxOptions({ connector: {} } as never)).toThrow(InvalidOptionError);
    expect(() => resolveOutboxOptions(undefined as never)).toThrow(InvalidOptionError);
  });
});

describe('outbox schema', () => {
  it('quotes every name it writes, schema-qualified ones part by part', () => {
    expect(qualified('app.outbox')).toBe('"app"."outbox"');
    const sql = schemaSql({ outbox: 'app.outbox', inbox: 'app.inbox' });
    expect(sql).toContain('create table if not exists "app"."outbox"');
    expect(sql).toContain('create or replace function "app"."outbox_notify"()');
    expect(sql).toContain(`execute function "app"."outbox_notify"('app.outbox')`);
    expect(sql).toContain('create index if not exists "inbox_handled_at" on "app"."inbox" (handled_at)');
  });

  it('runs the DDL in one transaction behind an advisory lock', () => {
    const sql = migrationSql({ outbox: 'eventrail_outbox', inbox: 'eventrail_inbox' });
    expect(sql.startsWith('begin;\nselect pg_advisory_xact_lock(')).toBe(true);
    expect(sql.trimEnd().endsWith('commit;')).toBe(true);
  });

  it('finds the SQLSTATE of an error that a library wrapped', () => {
    expect(sqlState({ code: '42P01' })).toBe('42P01');
    expect(sqlState({ driverError: { code: '42P01' } })).toBe('42P01');
    expect(sqlState({ cause: { code: '40001' } })).toBe('40001');
    expect(sqlState({ code: 'ECONNREFUSED' })).toBeUndefined();
    expect(sqlState(null)).toBeUndefined();
  });
});
