import { Client } from 'pg';
import { assertBuilt, cliEnv, outcome, parseJson, runCli } from './cli.harness';
import { PostgresServer, startPostgres } from '../support/postgres';

/** `eventrail outbox migrate` and `outbox status` against a real PostgreSQL; neither needs Redis. */
describe('eventrail outbox', () => {
  let server: PostgresServer;
  let url: string;
  let db: Client;
  const env = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => cliEnv('unused', extra);

  beforeAll(async () => {
    assertBuilt();
    server = await startPostgres();
    url = await server.createDatabase();
    db = new Client({ connectionString: url });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
    await server?.stop();
  });

  it('migrate creates the tables, trigger and index, and can run again', async () => {
    const first = await runCli(['outbox', 'migrate', '--database-url', url, '--json'], env());
    expect(outcome(first)).toEqual({ code: 0, stderr: '' });
    expect(parseJson(first)).toEqual({
      migrated: true,
      database: url.replace('postgres@', '***@'), // credentials are never printed
      outboxTable: 'eventrail_outbox',
      inboxTable: 'eventrail_inbox',
    });
    const again = await runCli(['outbox', 'migrate'], env({ DATABASE_URL: url }));
    expect(outcome(again)).toEqual({ code: 0, stderr: '' });
    expect(again.stdout).toContain('Outbox schema ready');
    const tables = await db.query(`select table_name from information_schema.tables where table_name like 'eventrail_%' order by 1`);
    expect(tables.rows.map((r: { table_name: string }) => r.table_name)).toEqual(['eventrail_inbox', 'eventrail_outbox']);
    const triggers = await db.query(`select tgname from pg_trigger where tgname = 'eventrail_outbox_notify'`);
    expect(triggers.rowCount).toBe(1);
  });

  it('migrate takes schema-qualified names, and --print prints the SQL without connecting', async () => {
    await db.query('create schema if not exists app');
    const result = await runCli(
      ['outbox', 'migrate', '--database-url', url, '--outbox-table', 'app.out', '--inbox-table', 'app.inb'],
      env(),
    );
    expect(outcome(result)).toEqual({ code: 0, stderr: '' });
    expect(
      (await db.query(`select 1 from information_schema.tables where table_schema = 'app' and table_name in ('out', 'inb')`)).rowCount,
    ).toBe(2);
    const printed = await runCli(['outbox', 'migrate', '--print', '--database-url', 'postgres://nobody@127.0.0.1:1/none'], env());
    expect(outcome(printed)).toEqual({ code: 0, stderr: '' });
    expect(printed.stdout).toContain('create table if not exists "eventrail_outbox"');
  });

  it('refuses a missing database URL or a bad table name as usage errors', async () => {
    const noUrl = await runCli(['outbox', 'migrate'], env());
    expect(outcome(noUrl)).toEqual({ code: 2, stderr: 'eventrail: no database: pass --database-url or set DATABASE_URL\n' });
    const badTable = await runCli(['outbox', 'migrate', '--database-url', url, '--outbox-table', 'x; drop table y'], env());
    expect(badTable.code).toBe(2);
    expect(badTable.stderr).toContain('--outbox-table');
    const unreachable = await runCli(['outbox', 'status', '--database-url', 'postgres://u:secret@127.0.0.1:1/none'], env());
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).not.toContain('secret');
  });

  it('status shows waiting and failed rows and the oldest age', async () => {
    await runCli(['outbox', 'migrate', '--database-url', url], env());
    await db.query(
      `insert into eventrail_outbox (event_id, event, data, created_at) values ('a', 'e', '1', now() - interval '90 seconds'), ('b', 'e', '2', now())`,
    );
    await db.query(`insert into eventrail_outbox (event_id, event, data, failed) values ('c', 'e', '3', 'bad')`);
    const result = await runCli(['outbox', 'status', '--database-url', url, '--json'], env());
    expect(outcome(result)).toEqual({ code: 0, stderr: '' });
    const status = parseJson<{ depth: number; failed: number; oldestAgeMs: number }>(result);
    expect(status).toMatchObject({ table: 'eventrail_outbox', depth: 2, failed: 1 });
    expect(status.oldestAgeMs).toBeGreaterThanOrEqual(90_000);
    const human = await runCli(['outbox', 'status', '--database-url', url], env());
    expect(human.stdout).toMatch(
      /Outbox eventrail_outbox: 2 row\(s\) waiting, the oldest for 1\.\d+ min|Outbox eventrail_outbox: 2 row\(s\) waiting, the oldest for/,
    );
    expect(human.stdout).toContain('1 row(s) the relay could not append');
  });
});
