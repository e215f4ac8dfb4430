import type { Command } from 'commander';
import type { RetentionOptions } from '../../retention/retention.options';
import { ARCHIVE_VARIABLES, retentionOptionsFromEnv } from '../../retention/retention-env';
import { InvalidOptionError } from '../../errors/invalid-option.error';
import type { RetentionRunResult } from '../../admin/operations.types';
import { parseNonNegative } from '../runtime/argument.parser';
import type { CliRunner } from '../runtime/cli.runner';
import { ExitCode } from '../runtime/exit-code';
import { assertConfirmable, confirm } from '../runtime/confirm.prompt';
import { ConfirmationDeclinedError } from '../errors/confirmation-declined.error';
import { CONFIRMATION_NOTE, examples } from '../runtime/help.text';
import { formatTable } from '../runtime/table.formatter';
import { formatDuration, formatList, NONE } from '../runtime/value.format';

const UNARCHIVED_NOTE =
  'Without RETENTION_ARCHIVE_*, on a log that an instance archives, only entries the archive already has are\n' +
  'trimmed (the others are reported per partition, exit code 1) unless --allow-unarchived-trim.\n';

const ENV_NOTE =
  '\nRetention options come from the RETENTION_* variables of retentionOptionsFromEnv() (RETENTION_STREAM_MAX_LEN,\n' +
  'RETENTION_STREAM_KEEP_MS, RETENTION_DLQ_MAX_LEN, RETENTION_ARCHIVE_DRIVER, RETENTION_ARCHIVE_DIR, RETENTION_S3_*, ...).\n' +
  'RETENTION_ENABLED is ignored: the command runs one cycle now.\n';

export function registerRetentionCommands(program: Command, runner: CliRunner): void {
  const retention = program
    .command('retention')
    .description('trim the log now, and list archived ranges')
    .addHelpText('after', examples(['eventrail retention run --max-len 100000', 'eventrail retention archives']));

  retention
    .command('run')
    .description('run one retention cycle now: archive (when configured), then trim what no live group still needs')
    .option('--max-len <n>', 'keep at most this many entries per partition (overrides RETENTION_STREAM_MAX_LEN)', parseNonNegative)
    .option('--max-age-ms <ms>', 'remove entries older than this (overrides RETENTION_STREAM_KEEP_MS)', parseNonNegative)
    .option(
      '--allow-unarchived-trim',
      'without RETENTION_ARCHIVE_*, also trim entries the archive does not have on a log that is archived (RETENTION_ALLOW_UNARCHIVED_TRIM)',
    )
    .option('-y, --yes', 'do not ask for confirmation')
    .addHelpText(
      'after',
      CONFIRMATION_NOTE +
        examples(['RETENTION_STREAM_KEEP_MS=604800000 eventrail retention run', 'eventrail retention run --max-len 100000 --yes --json']) +
        ENV_NOTE +
        UNARCHIVED_NOTE,
    )
    .action(
      runner.action<{ maxLen?: number; maxAgeMs?: number; allowUnarchivedTrim?: boolean; yes?: boolean }>(async (ctx, _args, flags) => {
        const options: RetentionOptions = { ...retentionOptionsFromEnv(), enabled: false };
        if (flags.maxLen !== undefined) options.maxLen = flags.maxLen;
        if (flags.maxAgeMs !== undefined) options.maxAgeMs = flags.maxAgeMs;
        if (flags.allowUnarchivedTrim) options.allowUnarchivedTrim = true;
        const limits = describeLimits(options);
        const yes = flags.yes === true;
        // With no limit nothing can go: nothing to confirm.
        if (limits === undefined)
          ctx.output.notice('No retention limit is set (--max-len, --max-age-ms or RETENTION_*): nothing will be trimmed.');
        else assertConfirmable(yes, 'run a retention cycle');
        const { admin } = await ctx.open({ retention: options });
        if (limits !== undefined && !(await confirm(yes, `Trim the log for good (${limits})?`)))
          throw new ConfirmationDeclinedError('run a retention cycle');
        const progress = ctx.progress('Retention', 'partitions');
        let result: RetentionRunResult;
        try {
          result = await admin.runRetention({ onProgress: progress.listener });
        } finally {
          progress.stop();
        }
        ctx.output.result(result, () => renderRun(result));
        return result.partitions.some((p) => p.error !== undefined) ? ExitCode.Failed : ExitCode.Ok;
      }),
    );

  retention
    .command('archives')
    .description('archive objects written by retention (needs RETENTION_ARCHIVE_* settings)')
    .option('--partition <n>', 'only this partition', parseNonNegative)
    .addHelpText(
      'after',
      examples(['RETENTION_ARCHIVE_DRIVER=fs RETENTION_ARCHIVE_DIR=/var/lib/eventrail eventrail retention archives --partition 0']) +
        ENV_NOTE,
    )
    .action(
      runner.action<{ partition?: number }>(async (ctx, _args, { partition }) => {
        const fromEnv = retentionOptionsFromEnv();
        // Checked before connecting, so the message says which variables to set rather than which option is missing.
        if (!fromEnv.archive) {
          throw new InvalidOptionError(
            'RETENTION_ARCHIVE_DRIVER',
            undefined,
            `an archive to list: set ${ARCHIVE_VARIABLES}`,
            'no archive variables',
          );
        }
        const { admin } = await ctx.open({ retention: { ...fromEnv, enabled: false } });
        const archives = await admin.listArchives(partition === undefined ? {} : { partition });
        ctx.output.result(archives, () =>
          archives.length === 0
            ? 'No archives.'
            : formatTable(archives, [
                { header: 'partition', value: (a) => a.partition, align: 'right' },
                { header: 'first id', value: (a) => a.firstId },
                { header: 'last id', value: (a) => a.lastId },
                { header: 'name', value: (a) => a.name },
              ]),
        );
      }),
    );
}

/** The limits of this run in words, for the question; undefined when there is none. */
function describeLimits(options: RetentionOptions): string | undefined {
  const limits = [
    options.maxLen === undefined ? undefined : `keep at most ${options.maxLen} entries per partition`,
    options.maxAgeMs === undefined ? undefined : `remove entries older than ${formatDuration(options.maxAgeMs)}`,
    options.deadLetterMaxLen === undefined ? undefined : `keep at most ${options.deadLetterMaxLen} dead letters per group`,
  ].filter((limit) => limit !== undefined);
  if (limits.length === 0) return undefined;
  const archive = options.archive ? `archived to ${options.archive.driver} first` : 'no archive';
  return `${limits.join(', ')}; ${archive}; entries a live group has not committed are kept`;
}

function renderRun(result: RetentionRunResult): string {
  if (!result.ran) return 'Another instance is running a retention cycle: nothing done.';
  const sections = [
    formatTable(result.partitions, [
      { header: 'partition', value: (p) => p.partition, align: 'right' },
      { header: 'trimmed', value: (p) => p.trimmed, align: 'right' },
      { header: 'archived', value: (p) => p.archived.reduce((sum, a) => sum + a.count, 0), align: 'right' },
      { header: 'min id', value: (p) => p.minId ?? NONE },
      { header: 'held back by', value: (p) => p.heldBackBy.join(',') || NONE },
      { header: 'error', value: (p) => p.error ?? NONE },
    ]),
  ];
  if (result.staleGroups.length > 0) sections.push(`Stale groups (no longer holding the log back): ${formatList(result.staleGroups)}`);
  if (result.deadLetters.length > 0)
    sections.push(`Dead letters trimmed: ${formatList(result.deadLetters.map((d) => `${d.group} ${d.trimmed}`))}`);
  return sections.join('\n\n');
}
