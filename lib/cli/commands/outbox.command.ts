import type { Command } from 'commander';
import { MissingPeerDependencyError } from '../../errors/missing-peer-dependency.error';
import { checkTable, OUTBOX_DEFAULTS } from '../../outbox/outbox.options';
import { migrationSql, schemaSql } from '../../outbox/outbox-schema';
import { importOptionalPeer } from '../../util/optional-peer';
import { redactUrl } from '../../util/redact-url';
import type { CliRunner } from '../runtime/cli.runner';
import { CliUsageError } from '../errors/cli-usage.error';
import { examples } from '../runtime/help.text';
import { formatDuration } from '../runtime/value.format';
import { readOutboxStatus } from '../../outbox/outbox-status.reader';
import type { CliContext } from '../runtime/cli.context';

interface MigrateOptions {
  databaseUrl?: string;
  outboxTable: string;
  inboxTable: string;
  print?: boolean;
}

/** `eventrail outbox migrate`: the outbox's DDL, run against PostgreSQL or printed. Needs no Redis. */
export function registerOutboxCommands(program: Command, runner: CliRunner): void {
  const outbox = program.command('outbox').description('the outbox and inbox tables in PostgreSQL (nestjs-eventrail/outbox)');
  outbox
    .command('migrate')
    .description('create the outbox and inbox tables, the NOTIFY trigger and the index (idempotent; PostgreSQL 14+)')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .option('--outbox-table <name>', 'outbox table, optionally schema-qualified', OUTBOX_DEFAULTS.outboxTable)
    .option('--inbox-table <name>', 'inbox table, optionally schema-qualified', OUTBOX_DEFAULTS.inboxTable)
    .option('--print', 'print the SQL instead of running it (no connection)')
    .addHelpText(
      'after',
      examples([
        'eventrail outbox migrate --database-url postgres://app@db/app',
        'DATABASE_URL=postgres://app@db/app eventrail outbox migrate --outbox-table app.outbox',
        'eventrail outbox migrate --print > migrations/eventrail-outbox.sql',
      ]) + '\nNeeds the pg package (npm install pg). Safe to run again: every statement is "if not exists" or "or replace".\n',
    )
    .action(
      runner.action<MigrateOptions>(async (ctx, _args, options) => {
        const tables = {
          outbox: usageChecked(() => checkTable('--outbox-table', options.outboxTable)),
          inbox: usageChecked(() => checkTable('--inbox-table', options.inboxTable)),
        };
        if (tables.outbox === tables.inbox) throw new CliUsageError('--outbox-table and --inbox-table must differ');
        if (options.print) {
          process.stdout.write(schemaSql(tables));
          return;
        }
        const url = databaseUrl(options.databaseUrl);
        await withDatabase(ctx, url, 'eventrail outbox migrate', (client) => client.query(migrationSql(tables)));
        ctx.output.result(
          { migrated: true, database: redactUrl(url), outboxTable: tables.outbox, inboxTable: tables.inbox },
          () => `Outbox schema ready in ${redactUrl(url)}: ${tables.outbox}, ${tables.inbox}`,
        );
      }),
    );

  outbox
    .command('status')
    .description("rows waiting in the outbox, rows the relay could not append, and the oldest waiting row's age")
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .option('--outbox-table <name>', 'outbox table, optionally schema-qualified', OUTBOX_DEFAULTS.outboxTable)
    .addHelpText('after', examples(['eventrail outbox status --database-url postgres://app@db/app --json']))
    .action(
      runner.action<Omit<MigrateOptions, 'inboxTable' | 'print'>>(async (ctx, _args, options) => {
        const table = usageChecked(() => checkTable('--outbox-table', options.outboxTable));
        const url = databaseUrl(options.databaseUrl);
        const status = await withDatabase(ctx, url, 'eventrail outbox status', (client) =>
          readOutboxStatus(async (sql, params) => (await client.query(sql, params ? [...params] : [])).rows, table),
        );
        ctx.output.result(status, () =>
          [
            `Outbox ${table}: ${status.depth} row(s) waiting` +
              (status.oldestAgeMs === null ? '' : `, the oldest for ${formatDuration(status.oldestAgeMs)}`),
            status.failed > 0 ? `${status.failed} row(s) the relay could not append (see their failed column)` : '',
          ]
            .filter(Boolean)
            .join('\n'),
        );
      }),
    );
}

function databaseUrl(given: string | undefined): string {
  const url = given ?? process.env.DATABASE_URL;
  if (!url) throw new CliUsageError('no database: pass --database-url or set DATABASE_URL');
  return url;
}

interface PgClient {
  query(sql: string, params?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }>;
}

/** Connects with `pg` (an optional peer, loaded only here), runs `work`, and always disconnects. */
async function withDatabase<T>(ctx: CliContext, url: string, command: string, work: (client: PgClient) => Promise<T>): Promise<T> {
  const { Client } = await importOptionalPeer(
    () => import('pg'),
    (error) => new MissingPeerDependencyError('pg', command, error),
  );
  const client = new Client({ connectionString: url, connectionTimeoutMillis: ctx.globals.connectTimeout });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** An invalid table name is a usage error (exit code 2), worded with the flag. */
function usageChecked(check: () => string): string {
  try {
    return check();
  } catch (error) {
    throw new CliUsageError((error as Error).message.replace('Invalid eventrail option ', 'Invalid '));
  }
}
