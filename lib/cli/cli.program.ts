import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { parseCount } from './runtime/argument.parser';
import type { CliRunner } from './runtime/cli.runner';
import { registerDlqCommands } from './commands/dlq.command';
import { registerGroupCommands } from './commands/groups.command';
import { registerLagCommand } from './commands/lag.command';
import { registerMetricsCommand } from './commands/metrics.command';
import { registerOffsetsCommands } from './commands/offsets.command';
import { registerOutboxCommands } from './commands/outbox.command';
import { registerParkedCommands } from './commands/parked.command';
import { registerPruneStaleCommand } from './commands/prune-stale.command';
import { registerPublishCommand } from './commands/publish.command';
import { registerRetentionCommands } from './commands/retention.command';
import { registerStatusCommand } from './commands/status.command';
import { registerTailCommand } from './commands/tail.command';
import { examples } from './runtime/help.text';

const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;

const ABOUT = `
Connection: --redis-url, else EVENTRAIL_REDIS_URL, else redis://localhost:6379.
            Redis Cluster: --cluster (or EVENTRAIL_REDIS_CLUSTER=1; --no-cluster beats it), and the URL is a
            comma-separated list of seed nodes: redis://10.0.0.1:7000,redis://10.0.0.2:7000.
            TLS: rediss:// (valkey:// and valkeys:// are aliases), with --tls-ca for a private CA and
            --tls-cert/--tls-key for a client certificate (or EVENTRAIL_REDIS_TLS_CA/CERT/KEY).
Log:        --prefix, else EVENTRAIL_PREFIX, else "eventrail". The partition count is read from the log.

Every read command takes --json: one JSON document on stdout (tail: one object per line).
Errors are one line on stderr ("eventrail: <message>"); with --json also { "error": { name, message } } on stdout.

Exit codes:
  0  done (also when there was nothing to do)
  1  failed: Redis unreachable, no log at the prefix, unknown group, live members (see --force), ...
  2  usage: unknown command or option, missing or invalid argument, destructive command without --yes
`;

/** The `eventrail` command tree. Usage errors surface as `CommanderError`s (exitOverride), which the runner maps to exit code 2. */
export function createProgram(runner: CliRunner): Command {
  const program = new Command('eventrail')
    .description('Operate an eventrail log: groups, offsets, dead letters, retention, and a live tail.')
    .version(packageVersion(), '-V, --version')
    .option(
      '--redis-url <url>',
      'Redis URL; with --cluster, comma-separated seed node URLs (default: EVENTRAIL_REDIS_URL, else redis://localhost:6379)',
    )
    .option('--cluster', 'connect to a Redis Cluster through the seed nodes of --redis-url (default: EVENTRAIL_REDIS_CLUSTER=1)')
    .option('--no-cluster', 'a single Redis, even when EVENTRAIL_REDIS_CLUSTER=1')
    .option('--tls-ca <file>', 'PEM file of the CA that signed the server certificate, for rediss:// (default: EVENTRAIL_REDIS_TLS_CA)')
    .option('--tls-cert <file>', 'PEM client certificate, when the server asks for one (default: EVENTRAIL_REDIS_TLS_CERT)')
    .option('--tls-key <file>', 'PEM key of --tls-cert (default: EVENTRAIL_REDIS_TLS_KEY)')
    .option('--prefix <prefix>', 'key prefix of the log (default: EVENTRAIL_PREFIX, else "eventrail")')
    .option('--json', 'machine-readable output on stdout')
    .option('--verbose', 'log connection and library messages on stderr')
    .option('--connect-timeout <ms>', 'fail when Redis does not answer within this time', parseCount, DEFAULT_CONNECT_TIMEOUT_MS)
    // Settings are inherited by every command added below.
    .exitOverride()
    .configureOutput({ outputError: () => undefined }) // the runner prints every error in one format
    .showSuggestionAfterError()
    .addHelpText(
      'after',
      ABOUT +
        examples([
          'eventrail status',
          'eventrail --prefix orders groups --json',
          'eventrail dlq list billing',
          'eventrail --cluster --redis-url redis://10.0.0.1:7000,redis://10.0.0.2:7000 status',
          'eventrail --redis-url rediss://cache.internal:6380 --tls-ca ca.pem status',
        ]),
    );

  registerStatusCommand(program, runner);
  registerGroupCommands(program, runner);
  registerLagCommand(program, runner);
  registerMetricsCommand(program, runner);
  registerDlqCommands(program, runner);
  registerParkedCommands(program, runner);
  registerOffsetsCommands(program, runner);
  registerTailCommand(program, runner);
  registerPublishCommand(program, runner);
  registerPruneStaleCommand(program, runner);
  registerRetentionCommands(program, runner);
  registerOutboxCommands(program, runner);
  return program;
}

/** From the package's own package.json: two levels up from both lib/cli and dist/cli. */
function packageVersion(): string {
  try {
    return (JSON.parse(readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}
