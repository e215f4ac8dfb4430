import { isDeepStrictEqual } from 'node:util';
import { INestApplicationContext, Injectable, Provider } from '@nestjs/common';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, InvalidEventDataError, OnEvent } from '../../lib';
import { EventrailOutboxAdmin, EventrailOutboxRelay, pgConnector } from '../../lib/outbox';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { createOutboxApp, uniqueTables } from '../support/outbox';
import { PostgresServer, startPostgres } from '../support/postgres';
import { seededRandom } from '../support/seeded-random';

/*
 * Attacks on the relay's "data as stored" change (publishStored): a row's data must land in the log byte
 * for byte as stored; a row whose data is not JSON or is over maxPayloadBytes must be failed and not
 * appended; nothing else about publishing may change.
 */

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register({ propagator: new W3CTraceContextPropagator(), contextManager: new AsyncLocalStorageContextManager() });

/** What the consumer's handler received, by event id. */
const received = new Map<string, { data: unknown; headers: Record<string, string> }>();

@Injectable()
class EdgeHandler {
  @OnEvent('attack.edge', { group: 'edge', retryBackoffMs: 5, retryBackoffMaxMs: 20 })
  handle(message: EventrailMessage<unknown>): void {
    received.set(message.id, { data: message.data, headers: message.headers });
  }
}

interface StagedRow {
  id: string;
  data: string;
  key?: string | null;
  headers?: string | null;
  partition?: number | null;
  event?: string;
}

interface Entry {
  id: string;
  key?: string;
  data: string;
  headers?: string;
}

describe('outbox relay: data as stored, attacked', () => {
  let server: PostgresServer;
  let pool: Pool;
  let redis: Redis;
  let apps: INestApplicationContext[] = [];
  const prefixes: string[] = [];

  const start = async (
    prefix: string,
    tables: { outboxTable: string; inboxTable: string },
    options: {
      maxPayloadBytes?: number;
      partitions?: number;
      tracing?: boolean;
      consumers?: Provider[];
      batchSize?: number;
    } = {},
  ): Promise<INestApplicationContext> => {
    if (!prefixes.includes(prefix)) prefixes.push(prefix);
    const app = await createOutboxApp(
      {
        prefix,
        partitions: options.partitions ?? 1,
        autoStart: options.consumers !== undefined,
        maxPayloadBytes: options.maxPayloadBytes ?? 64 * 1024,
        tracing: { enabled: options.tracing === true },
      },
      {
        connector: pgConnector(pool),
        ...tables,
        relay: { pollIntervalMs: 20, retryBackoffMs: 20, retryBackoffMaxMs: 200, batchSize: options.batchSize ?? 500 },
      },
      options.consumers ?? [],
    );
    apps.push(app);
    await app.get(EventrailOutboxAdmin).status();
    return app;
  };

  /** Inserts the rows in one statement (so they commit together and are read in one batch). */
  const insert = async (table: string, prefix: string, rows: StagedRow[]): Promise<void> => {
    const values: unknown[] = [];
    const tuples = rows.map((row) => {
      const at = values.length;
      values.push(row.id, row.event ?? 'attack.edge', row.key ?? null, row.partition ?? null, row.data, row.headers ?? null, prefix);
      return `(${Array.from({ length: 7 }, (_, i) => `$${at + i + 1}`).join(', ')})`;
    });
    await pool.query(`insert into ${table} (event_id, event, key, partition, data, headers, log) values ${tuples.join(', ')}`, values);
  };

  /** Raw entries of one partition's stream: the fields as Redis holds them, not parsed. */
  const entries = async (prefix: string, partition = 0): Promise<Entry[]> =>
    (await redis.xrange(`{${prefix}:${partition}}:log`, '-', '+')).map(([, fields]) => {
      const map = new Map<string, string>();
      for (let i = 0; i < fields.length; i += 2) map.set(fields[i], fields[i + 1]);
      return { id: map.get('id') as string, key: map.get('key'), data: map.get('data') as string, headers: map.get('headers') };
    });

  const failedRows = async (table: string): Promise<Array<{ event_id: string; failed: string }>> =>
    (await pool.query(`select event_id, failed from ${table} where failed is not null order by id`)).rows;

  const describeState = async (table: string, prefix: string, app: INestApplicationContext): Promise<string> =>
    JSON.stringify({
      log: (await entries(prefix)).map((e) => e.id),
      failed: await failedRows(table),
      stats: app.get(EventrailOutboxRelay).stats(),
      status: await app.get(EventrailOutboxAdmin).status(),
    });

  beforeAll(async () => {
    server = await startPostgres();
    pool = new Pool({ connectionString: await server.createDatabase(), max: 10 });
    pool.on('error', () => undefined); // a terminated idle client (the crash test)
    redis = new Redis(testRedisUrl());
  });
  afterAll(async () => {
    await pool?.end();
    redis?.disconnect();
    await server?.stop();
    await provider.shutdown();
  });
  beforeEach(() => {
    received.clear();
    exporter.reset();
  });
  afterEach(async () => {
    await Promise.all(apps.map((app) => app.close()));
    apps = [];
    for (const prefix of prefixes.splice(0)) await deletePrefix(redis, prefix);
  });

  jest.setTimeout(120_000);

  // ---------------------------------------------------------------------------------------------------
  // What held (regression tests)
  // ---------------------------------------------------------------------------------------------------

  it('appends JSON texts that JSON.stringify would write otherwise byte for byte, fails what JSON.parse refuses, and the handler receives exactly JSON.parse(stored)', async () => {
    const tables = uniqueTables();
    const prefix = uniquePrefix('edge');
    const app = await start(prefix, tables, { consumers: [EdgeHandler] });
    await app.get(EventrailConsumers).whenRunning();
    const good = [
      ' {"a" : 1 ,"b":[ 1 , 2 ]}\n',
      '\t\r\n {} \t',
      '{"a":1,"a":2}',
      '{"__proto__":{"polluted":true},"constructor":{"prototype":1}}',
      '-0',
      '[-0, 0.0, 1E5, 1e-7, 2.50, 0.1E-7, 1e20, 1e21]',
      '12345678901234567890123',
      '123456789012345678901234567890.123456789e-5',
      '"\\u00e9\\ud834\\udd1e\\/\\b\\f\\u0000"',
      '"\u2028\u2029"',
      '"\\u2028\\u2029"',
      '"\\ud800 lone \\udc00"',
      '{"é":"𝄞 \u00a0 €","\\u0041":"\\"quoted\\""}',
      'null',
      'true',
      'false',
      '0',
      '"just a string"',
      '[]',
      `${'['.repeat(999)}${']'.repeat(999)}`,
      `${'{"a":'.repeat(500)}1${'}'.repeat(500)}`,
    ];
    const bad = [
      '\uFEFF{}', // a BOM is not JSON whitespace
      '"a\tb"', // a raw control character in a string
      '\u00a0{}', // NBSP is not JSON whitespace
      '\u2028{}',
      'NaN',
      'Infinity',
      '{"a":1,}',
      '',
      ' ',
      '[1] [2]',
      "'x'",
      '{"a":1}//',
      '"\\x41"',
      '01',
      '+1',
      '.5',
      `${'['.repeat(10_000)}`,
    ];
    // Interleaved: good and bad rows share batches.
    const rows: StagedRow[] = [];
    for (let i = 0; i < Math.max(good.length, bad.length); i++) {
      if (i < good.length) rows.push({ id: `good-${i}`, data: good[i] });
      if (i < bad.length) rows.push({ id: `bad-${i}`, data: bad[i] });
    }
    await insert(tables.outboxTable, prefix, rows);
    await waitFor(
      async () => (await app.get(EventrailOutboxAdmin).status()).depth === 0,
      () => describeState(tables.outboxTable, prefix, app),
    );
    const log = await entries(prefix);
    const goodRows = rows.filter((row) => row.id.startsWith('good-'));
    expect(log.map((e) => ({ id: e.id, data: e.data }))).toEqual(goodRows.map((row) => ({ id: row.id, data: row.data })));
    expect((await failedRows(tables.outboxTable)).map((row) => row.event_id)).toEqual(
      rows.filter((row) => row.id.startsWith('bad-')).map((row) => row.id),
    );
    for (const row of await failedRows(tables.outboxTable)) expect(row.failed).toMatch(/not JSON/);
    // The consumer side: each handler call gets exactly JSON.parse(stored text).
    await waitFor(
      () => received.size === goodRows.length,
      () => `handled ${received.size} of ${goodRows.length}`,
    );
    for (const row of goodRows) {
      const got = received.get(row.id);
      const expected: unknown = JSON.parse(row.data);
      expect({ id: row.id, same: isDeepStrictEqual(got?.data, expected) }).toEqual({ id: row.id, same: true });
    }
    expect(Object.is(received.get(`good-${good.indexOf('-0')}`)?.data, -0)).toBe(true);
    const proto = received.get(`good-${good.findIndex((text) => text.includes('__proto__'))}`)?.data as Record<string, unknown>;
    expect(Object.getPrototypeOf(proto)).toBe(Object.prototype);
    expect(Object.prototype.hasOwnProperty.call(proto, '__proto__')).toBe(true);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('counts maxPayloadBytes in UTF-8 bytes of the stored text: exactly the limit is appended, one byte over is failed (2-, 3- and 4-byte characters, U+2028)', async () => {
    const tables = uniqueTables();
    const prefix = uniquePrefix('utf8');
    const max = 1200;
    const app = await start(prefix, tables, { maxPayloadBytes: max });
    /** A JSON string of exactly `bytes` UTF-8 bytes, mostly `char`, padded with ASCII. */
    const text = (char: string, bytes: number): string => {
      const width = Buffer.byteLength(char, 'utf8');
      const count = Math.floor((bytes - 2) / width);
      const body = char.repeat(count) + 'a'.repeat(bytes - 2 - count * width);
      const json = JSON.stringify(body);
      expect(Buffer.byteLength(json, 'utf8')).toBe(bytes);
      return json;
    };
    const rows: StagedRow[] = [];
    for (const [name, char] of [
      ['e-acute', 'é'],
      ['euro', '€'],
      ['clef', '𝄞'],
      ['ls', '\u2028'],
    ] as const) {
      rows.push({ id: `${name}-at`, data: text(char, max) }, { id: `${name}-over`, data: text(char, max + 1) });
    }
    // Whitespace counts too: at the limit through a trailing space. (One byte over through whitespace alone:
    // see 'fails a row whose stored text is over maxPayloadBytes only through its whitespace' below.)
    rows.push({ id: 'space-at', data: `${text('€', max - 1)} ` });
    await insert(tables.outboxTable, prefix, rows);
    await waitFor(
      async () => (await app.get(EventrailOutboxAdmin).status()).depth === 0,
      () => describeState(tables.outboxTable, prefix, app),
      10_000,
    );
    const log = await entries(prefix);
    expect(log.map((e) => ({ id: e.id, data: e.data }))).toEqual(
      rows.filter((row) => row.id.endsWith('-at')).map((row) => ({ id: row.id, data: row.data })),
    );
    const failed = await failedRows(tables.outboxTable);
    expect(failed.map((row) => row.event_id)).toEqual(rows.filter((row) => row.id.endsWith('-over')).map((row) => row.id));
    for (const row of failed) expect(row.failed).toMatch(new RegExp(`1201.*${max}|maxPayloadBytes`));
  });

  it('keeps order per key behind a failed row, lets other keys and keyless rows go, and appends the fixed row as stored before its key’s later rows', async () => {
    const tables = uniqueTables();
    const prefix = uniquePrefix('keyed');
    const app = await start(prefix, tables, { maxPayloadBytes: 1024 });
    await insert(tables.outboxTable, prefix, [
      { id: 'a1', key: 'k1', data: ' {"n" : 1} ' },
      { id: 'b1', key: 'k2', data: '[1 ,2]' },
      { id: 'a2', key: 'k1', data: '{"n": 2,}' }, // not JSON
      { id: 'c1', data: '"keyless"' },
      { id: 'a3', key: 'k1', data: '{"n":3}' },
      { id: 'b2', key: 'k2', data: JSON.stringify({ pad: 'x'.repeat(2000) }) }, // over maxPayloadBytes
      { id: 'b3', key: 'k2', data: '{ }' },
      { id: 'c2', data: '\n1E2\n' },
      { id: 'a4', key: 'k1', data: '{"n":4}' },
    ]);
    await waitFor(
      async () => (await failedRows(tables.outboxTable)).length === 2 && (await entries(prefix)).length === 4,
      () => describeState(tables.outboxTable, prefix, app),
    );
    // A keyless row committed after them: once it is in the log, the relay has read past the held rows.
    await insert(tables.outboxTable, prefix, [{ id: 'c3', data: '3' }]);
    await waitFor(
      async () => (await entries(prefix)).some((e) => e.id === 'c3'),
      () => describeState(tables.outboxTable, prefix, app),
    );
    // Nothing behind a failed row went.
    expect((await entries(prefix)).map((e) => [e.id, e.data])).toEqual([
      ['a1', ' {"n" : 1} '],
      ['b1', '[1 ,2]'],
      ['c1', '"keyless"'],
      ['c2', '\n1E2\n'],
      ['c3', '3'],
    ]);
    expect((await failedRows(tables.outboxTable)).map((row) => row.event_id)).toEqual(['a2', 'b2']);
    // Fix a2 with spaced JSON: it goes first, as stored, then a3, a4.
    await pool.query(`update ${tables.outboxTable} set data = $1, failed = null where event_id = 'a2'`, [' {"n" :\t2 } ']);
    await waitFor(
      async () => (await entries(prefix)).length === 8,
      () => describeState(tables.outboxTable, prefix, app),
    );
    expect((await entries(prefix)).slice(5).map((e) => [e.id, e.key, e.data])).toEqual([
      ['a2', 'k1', ' {"n" :\t2 } '],
      ['a3', 'k1', '{"n":3}'],
      ['a4', 'k1', '{"n":4}'],
    ]);
    // b2 deleted: b3 goes.
    await pool.query(`delete from ${tables.outboxTable} where event_id = 'b2'`);
    await waitFor(
      async () => (await entries(prefix)).length === 9,
      () => describeState(tables.outboxTable, prefix, app),
    );
    expect((await entries(prefix))[8]).toMatchObject({ id: 'b3', key: 'k2', data: '{ }' });
  });

  it('with tracing on: headers keep their values and get a traceparent, partitions hold, data as stored; bad headers JSON fails the row', async () => {
    const tables = uniqueTables();
    const prefix = uniquePrefix('traced');
    const app = await start(prefix, tables, { partitions: 2, tracing: true });
    const ownParent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await insert(tables.outboxTable, prefix, [
      { id: 't1', data: ' [1, 2] ', headers: ' {"h" : "v"} ', partition: 1 },
      { id: 't2', data: '{"x":"\\u00e9"}', headers: JSON.stringify({ traceparent: ownParent }) },
      { id: 't3', data: '7', key: 'some-key' },
      { id: 't4', data: '{}', headers: '{"h": 1' }, // headers not JSON
      { id: 't5', data: '{}', headers: '{"h": 1}' }, // header value not a string: the publisher refuses it
      { id: 't6', data: '\t"after"\t', partition: 1 },
    ]);
    await waitFor(
      async () => (await app.get(EventrailOutboxAdmin).status()).depth === 0,
      () => describeState(tables.outboxTable, prefix, app),
    );
    const all = [...(await entries(prefix, 0)), ...(await entries(prefix, 1))];
    const byId = new Map(all.map((e) => [e.id, e]));
    expect([...byId.keys()].sort()).toEqual(['t1', 't2', 't3', 't6']);
    expect((await entries(prefix, 1)).map((e) => e.id)).toEqual(expect.arrayContaining(['t1', 't6']));
    expect(byId.get('t1')?.data).toBe(' [1, 2] ');
    expect(byId.get('t2')?.data).toBe('{"x":"\\u00e9"}');
    expect(byId.get('t3')?.data).toBe('7');
    expect(byId.get('t6')?.data).toBe('\t"after"\t');
    const headersOf = (id: string): Record<string, string> => JSON.parse(byId.get(id)?.headers ?? '{}') as Record<string, string>;
    expect(headersOf('t1')).toMatchObject({ h: 'v', traceparent: expect.stringMatching(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/) });
    expect(headersOf('t2').traceparent).toBe(ownParent);
    expect(headersOf('t3').traceparent).toBeDefined();
    expect((await failedRows(tables.outboxTable)).map((row) => row.event_id)).toEqual(['t4', 't5']);
    const spans = exporter.getFinishedSpans().filter((span) => span.name.startsWith('publish '));
    expect(spans.length).toBeGreaterThanOrEqual(1);
  });

  it('a crash of the relay session and a restart mid-way: every row once, in order per key, byte for byte (dedup by event id)', async () => {
    const random = seededRandom(97);
    const tables = uniqueTables();
    const prefix = uniquePrefix('crash');
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)];
    const texts = [' {"a" : 1} ', '[1e20, -0]', '"\\u00e9"', '\n"\u2028"\n', '{"a":1,"a":2}', '12345678901234567890', '{"p":"𝄞"}'];
    const rows: StagedRow[] = Array.from({ length: 2000 }, (_, i) => ({
      id: `e${i}`,
      key: random() < 0.8 ? `k${Math.floor(random() * 5)}` : null,
      data: `${pick(texts)}${' '.repeat(Math.floor(random() * 3))}`,
    }));
    let app = await start(prefix, tables, { batchSize: 10 });
    const relay = app.get(EventrailOutboxRelay);
    await waitFor(() => relay.isActive(), 'the relay is active');
    await insert(tables.outboxTable, prefix, rows);
    // Kill the relay's session (its advisory lock holder) mid-way.
    await waitFor(async () => (await entries(prefix)).length >= 300, 'some rows relayed');
    const killed = await pool.query(
      `select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory' and granted and pid <> pg_backend_pid()`,
    );
    expect(killed.rowCount).toBeGreaterThanOrEqual(1);
    await waitFor(
      () => relay.stats().takeovers >= 2,
      () => `the relay took over again: ${JSON.stringify(relay.stats())}`,
    );
    // Then a restart mid-way.
    await waitFor(async () => (await entries(prefix)).length >= 1000, 'more rows relayed');
    await app.close();
    apps = apps.filter((a) => a !== app);
    app = await start(prefix, tables, { batchSize: 10 });
    await waitFor(
      async () => (await app.get(EventrailOutboxAdmin).status()).depth === 0,
      () => describeState(tables.outboxTable, prefix, app),
    );
    const log = await entries(prefix);
    expect(log.length).toBe(rows.length);
    expect(new Set(log.map((e) => e.id)).size).toBe(rows.length);
    const stored = new Map(rows.map((row) => [row.id, row]));
    for (const e of log) expect({ id: e.id, data: e.data }).toEqual({ id: e.id, data: stored.get(e.id)?.data });
    const order = (list: Array<{ id: string; key?: string | null }>, key: string): string[] =>
      list.filter((row) => (row.key ?? null) === key).map((row) => row.id);
    for (let k = 0; k < 5; k++) expect(order(log, `k${k}`)).toEqual(order(rows, `k${k}`));
    expect(await failedRows(tables.outboxTable)).toEqual([]);
  });

  // ---------------------------------------------------------------------------------------------------
  // What broke (these fail on ff0774b)
  // ---------------------------------------------------------------------------------------------------

  it('fails a row whose stored text is over maxPayloadBytes only through its whitespace, and relays the rows after it', async () => {
    const tables = uniqueTables();
    const prefix = uniquePrefix('padded');
    const app = await start(prefix, tables, { maxPayloadBytes: 1024 });
    await insert(tables.outboxTable, prefix, [
      // 2007 bytes as stored; JSON.stringify(JSON.parse(...)) is 7 bytes.
      { id: 'padded', data: `{"a":1}${' '.repeat(2000)}` },
      { id: 'after', data: '{"b":2}' },
    ]);
    await waitFor(
      async () => (await failedRows(tables.outboxTable)).length === 1 && (await entries(prefix)).length === 1,
      () => describeState(tables.outboxTable, prefix, app),
      10_000,
    );
    expect((await failedRows(tables.outboxTable))[0]).toMatchObject({ event_id: 'padded', failed: expect.stringMatching(/2007/) });
    expect((await entries(prefix)).map((e) => [e.id, e.data])).toEqual([['after', '{"b":2}']]);
  });

  it('fails a row whose stored text is over maxPayloadBytes only through its escapes, and relays the rows after it', async () => {
    const tables = uniqueTables();
    const prefix = uniquePrefix('escaped');
    const app = await start(prefix, tables, { maxPayloadBytes: 1024 });
    await insert(tables.outboxTable, prefix, [
      // 1802 bytes as stored ("\u0061" 300 times); serialised again, 302 bytes.
      { id: 'escaped', data: `"${'\\u0061'.repeat(300)}"`, key: 'k' },
      { id: 'other-key', data: '{"b":2}', key: 'j' },
    ]);
    await waitFor(
      async () => (await failedRows(tables.outboxTable)).length === 1 && (await entries(prefix)).length === 1,
      () => describeState(tables.outboxTable, prefix, app),
      10_000,
    );
    expect((await failedRows(tables.outboxTable))[0]).toMatchObject({ event_id: 'escaped', failed: expect.stringMatching(/1802/) });
    expect((await entries(prefix)).map((e) => e.id)).toEqual(['other-key']);
  });

  it('appends a row whose stored text fits maxPayloadBytes even when another row of its batch is refused (no second judgement on the data serialised again)', async () => {
    const tables = uniqueTables();
    const prefix = uniquePrefix('neighbour');
    const app = await start(prefix, tables, { maxPayloadBytes: 1024 });
    // 301 bytes as stored; JSON.stringify(JSON.parse(...)) writes 1e20 as 21 digits: 1321 bytes.
    const numbers = `[${Array(60).fill('1e20').join(',')}]`;
    // Alone, it is appended as stored.
    await insert(tables.outboxTable, prefix, [{ id: 'numbers-alone', data: numbers }]);
    await waitFor(
      async () => (await entries(prefix)).length === 1,
      () => describeState(tables.outboxTable, prefix, app),
    );
    expect((await entries(prefix))[0]).toMatchObject({ id: 'numbers-alone', data: numbers });
    // The same data in a batch with a row over maxPayloadBytes.
    await insert(tables.outboxTable, prefix, [
      { id: 'too-big', data: JSON.stringify({ pad: 'x'.repeat(2000) }) },
      { id: 'numbers-with-neighbour', data: numbers },
      { id: 'plain', data: '{"ok":true}' },
    ]);
    await waitFor(
      async () => (await app.get(EventrailOutboxAdmin).status()).depth === 0,
      () => describeState(tables.outboxTable, prefix, app),
      10_000,
    );
    expect((await failedRows(tables.outboxTable)).map((row) => [row.event_id, row.failed])).toEqual([['too-big', expect.any(String)]]);
    expect((await entries(prefix)).map((e) => [e.id, e.data])).toEqual([
      ['numbers-alone', numbers],
      ['numbers-with-neighbour', numbers],
      ['plain', '{"ok":true}'],
    ]);
  });

  it('refuses, as publishMany does (and the relay did before publishStored), data that parses to a non-finite number or nests over 1000 levels: the row is failed, not appended', async () => {
    const tables = uniqueTables();
    const prefix = uniquePrefix('nonfinite');
    const app = await start(prefix, tables, { consumers: [EdgeHandler] });
    await app.get(EventrailConsumers).whenRunning();
    // publishMany refuses the same data (so did the relay's publishMany call before publishStored).
    const publisher = app.get(EventrailPublisher);
    for (const text of ['1e400', '{"x":[-1e400]}', `${'['.repeat(1001)}${']'.repeat(1001)}`]) {
      await expect(publisher.publishMany([{ event: 'attack.edge', data: JSON.parse(text) as unknown }])).rejects.toThrow(
        InvalidEventDataError,
      );
      expect(() => publisher.check('attack.edge', JSON.parse(text))).toThrow(InvalidEventDataError);
    }
    await insert(tables.outboxTable, prefix, [
      { id: 'infinity', data: '1e400' },
      { id: 'minus-infinity', data: '{"x":[-1e400]}' },
      { id: 'deep', data: `${'['.repeat(1001)}${']'.repeat(1001)}` },
      { id: 'fine', data: '{"x":1}' },
    ]);
    await waitFor(
      async () => (await app.get(EventrailOutboxAdmin).status()).depth === 0,
      () => describeState(tables.outboxTable, prefix, app),
      10_000,
    );
    const log = await entries(prefix);
    const failed = await failedRows(tables.outboxTable);
    expect({ log: log.map((e) => e.id), failed: failed.map((row) => row.event_id) }).toEqual({
      log: ['fine'],
      failed: ['infinity', 'minus-infinity', 'deep'],
    });
    // What a handler would see otherwise: JSON.parse('1e400') is Infinity, which no publish can send.
    await waitFor(() => received.size === log.length, `handled ${received.size} of ${log.length}`);
    expect(received.get('infinity')).toBeUndefined();
  });
});
