import { Command, Option } from 'commander';
import type { ArchiveSource } from '../../admin/operations.types';
import { retentionOptionsFromEnv } from '../../retention/retention-env';
import { describeError } from '../../util/describe-error';
import { parseCount, parseIdOrTime, parseNonNegative, parseStreamId } from '../runtime/argument.parser';
import type { CliRunner } from '../runtime/cli.runner';
import { assertConfirmable, confirm } from '../runtime/confirm.prompt';
import { CliUsageError } from '../errors/cli-usage.error';
import { ConfirmationDeclinedError } from '../errors/confirmation-declined.error';
import { DeadLetterNotFoundError } from '../errors/dead-letter-not-found.error';
import { CONFIRMATION_NOTE, examples } from '../runtime/help.text';
import { renderDeadLetter, renderDeadLetters } from './dead-letter.view';

const DEFAULT_LIST_COUNT = 50;

export function registerDlqCommands(program: Command, runner: CliRunner): void {
  const dlq = program
    .command('dlq')
    .description("a group's dead letters: list, show, replay, purge, restore from the archive")
    .addHelpText(
      'after',
      examples([
        'eventrail dlq list billing',
        'eventrail dlq show billing 1718000000000-0',
        'eventrail dlq replay billing --all',
        'eventrail dlq purge billing --yes',
      ]),
    );

  for (const register of [registerList, registerShow, registerReplay, registerPurge, registerRestore]) register(dlq, runner);
}

/** `dlq list`: a page of dead letters, with the command for the next one. */
function registerList(dlq: Command, runner: CliRunner): void {
  dlq
    .command('list')
    .description('a page of dead letters, oldest first')
    .argument('<group>', 'consumer group')
    .addOption(new Option('--count <n>', 'dead letters to show (1 to 10000)').argParser(parseCount).default(DEFAULT_LIST_COUNT))
    .option('--after <id>', 'continue after this dead-letter id (the last one of the previous page)', parseStreamId)
    .option('--newest-first', 'newest first')
    .addHelpText('after', examples(['eventrail dlq list billing', 'eventrail dlq list billing --newest-first --count 10 --json']))
    .action(
      runner.action<{ count: number; after?: string; newestFirst?: boolean }>(async (ctx, [group], { count, after, newestFirst }) => {
        const { admin } = await ctx.open();
        const page = await admin.deadLetterPage(group as string, { count, after, newestFirst: newestFirst === true });
        const letters = page.items;
        ctx.output.result(letters, () => renderDeadLetters(group as string, letters));
        // A page stops at --count or at the byte budget; `next` says whether more follow either way.
        if (!ctx.output.json && page.next !== null) {
          // Every flag of this run again, or the printed command would list another page (or another log).
          const next = ctx.commandLine({
            command: ['dlq', 'list'],
            positionals: [group as string],
            options: [
              ...(newestFirst ? ['--newest-first'] : []),
              ...(count === DEFAULT_LIST_COUNT ? [] : ['--count', String(count)]),
              '--after',
              page.next,
            ],
          });
          const note = next.passwordRedacted ? ' (put the password back in place of *** in --redis-url)' : '';
          ctx.output.notice(`More may follow: ${next.text}${note}`);
        }
      }),
    );
}

/** `dlq show`: one dead letter in full. */
function registerShow(dlq: Command, runner: CliRunner): void {
  dlq
    .command('show')
    .description('one dead letter with its data, headers and error stack')
    .argument('<group>', 'consumer group')
    .argument('<id>', 'dead-letter id (first column of dlq list)', parseStreamId)
    .addHelpText('after', examples(['eventrail dlq show billing 1718000000000-0', 'eventrail dlq show billing 1718000000000-0 --json']))
    .action(
      runner.action(async (ctx, [group, id]) => {
        const letter = await (await ctx.open()).admin.deadLetter(group as string, id as string);
        if (!letter) throw new DeadLetterNotFoundError(group as string, [id as string]);
        ctx.output.result(letter, () => renderDeadLetter(letter));
      }),
    );
}

/** `dlq replay`: ids or `--all`, every id checked before anything is replayed. */
function registerReplay(dlq: Command, runner: CliRunner): void {
  dlq
    .command('replay')
    .description('append dead letters back to the log for this group only (other groups skip them), and remove them from the DLQ')
    .argument('<group>', 'consumer group')
    .argument('[ids...]', 'dead-letter ids to replay')
    .option('--all', 'replay every dead letter of the group')
    .addHelpText(
      'after',
      examples(['eventrail dlq replay billing 1718000000000-0 1718000000001-0', 'eventrail dlq replay billing --all']) +
        '\nA replay that fails again is dead-lettered anew; --all does not pick it up a second time.\n',
    )
    .action(
      runner.action<{ all?: boolean }>(async (ctx, [group, ids], { all }) => {
        const name = group as string;
        const wanted = (ids as string[]).map((id) => parseId(id));
        if ((all === true) === wanted.length > 0) throw new CliUsageError('dlq replay takes either dead-letter ids or --all');
        const { admin } = await ctx.open();
        if (wanted.length > 0) {
          // Checked first, so a mistyped id replays nothing rather than part of the list.
          const found = await Promise.all(wanted.map((id) => admin.deadLetter(name, id)));
          const missing = wanted.filter((_, i) => found[i] === null);
          if (missing.length > 0) throw new DeadLetterNotFoundError(name, missing);
        }
        const progress = ctx.progress('Replaying', 'dead letters');
        if (all) progress.start(await admin.deadLetterCount(name));
        let replayed: number;
        try {
          replayed = await admin.replayDeadLetters(name, all ? 'all' : wanted, { onProgress: progress.listener });
        } finally {
          progress.stop();
        }
        ctx.output.result({ group: name, replayed }, () =>
          replayed === 0 ? `No dead letters to replay in group "${name}".` : `Replayed ${replayed} dead letter(s) to group "${name}".`,
        );
      }),
    );
}

/** `dlq purge`: asks first unless `--yes`. */
function registerPurge(dlq: Command, runner: CliRunner): void {
  dlq
    .command('purge')
    .description('delete every dead letter of a group')
    .argument('<group>', 'consumer group')
    .option('-y, --yes', 'do not ask for confirmation')
    .addHelpText('after', CONFIRMATION_NOTE + examples(['eventrail dlq purge billing', 'eventrail dlq purge billing --yes --json']))
    .action(
      runner.action<{ yes?: boolean }>(async (ctx, [group], { yes }) => {
        const name = group as string;
        assertConfirmable(yes === true, `purge the dead letters of group "${name}"`);
        const { admin } = await ctx.open();
        const count = await admin.deadLetterCount(name);
        let purged = 0;
        if (count > 0) {
          if (!(await confirm(yes === true, `Delete the ${count} dead letter(s) of group "${name}" for good?`)))
            throw new ConfirmationDeclinedError(`purge the dead letters of group "${name}"`);
          purged = await admin.purgeDeadLetters(name);
        }
        ctx.output.result({ group: name, purged }, () =>
          purged === 0 ? `No dead letters in group "${name}".` : `Purged ${purged} dead letter(s) of group "${name}".`,
        );
      }),
    );
}

/** `dlq restore`: archived entries back for one group. */
function registerRestore(dlq: Command, runner: CliRunner): void {
  dlq
    .command('restore')
    .description('append archived entries (retention archive) back to the log for this group only')
    .argument('<group>', 'consumer group')
    .option('--archive <names...>', 'archive object names (as `eventrail retention archives` lists them)')
    .option('--from <id|time>', 'first archived entry to restore: a stream id or a time (inclusive)', parseIdOrTime)
    .option('--to <id|time>', 'last archived entry to restore (inclusive)', parseIdOrTime)
    .option('--partition <n>', 'only archives of this partition (with --from/--to)', parseNonNegative)
    .addHelpText(
      'after',
      examples([
        'eventrail dlq restore billing --archive t/p0/1718000000000-0_1718000099999-0.jsonl.gz',
        'eventrail dlq restore billing --from 2024-06-01T00:00:00Z --to 2024-06-02T00:00:00Z',
      ]) + '\nThe archive is configured with the RETENTION_ARCHIVE_* variables (see retentionOptionsFromEnv).\n',
    )
    .action(
      runner.action<{ archive?: string[]; from?: string | Date; to?: string | Date; partition?: number }>(async (ctx, [group], options) => {
        const name = group as string;
        const source = archiveSource(options);
        const { admin } = await ctx.open({ retention: { ...retentionOptionsFromEnv(), enabled: false } });
        const progress = ctx.progress('Restoring', 'archives');
        let restored: number;
        try {
          restored = await admin.restoreArchive(name, source, { onProgress: progress.listener });
        } finally {
          progress.stop();
        }
        ctx.output.result({ group: name, restored }, () =>
          restored === 0
            ? 'Nothing archived in that range.'
            : `Restored ${restored} entr${restored === 1 ? 'y' : 'ies'} for group "${name}".`,
        );
      }),
    );
}

function parseId(id: string): string {
  try {
    return parseStreamId(id);
  } catch (error) {
    throw new CliUsageError(`Invalid dead-letter id: ${describeError(error)}`);
  }
}

function archiveSource(options: { archive?: string[]; from?: string | Date; to?: string | Date; partition?: number }): ArchiveSource {
  const range = options.from !== undefined || options.to !== undefined || options.partition !== undefined;
  if (options.archive && range) throw new CliUsageError('dlq restore takes --archive or --from/--to/--partition, not both');
  if (options.archive) return options.archive;
  if (!range) throw new CliUsageError('dlq restore needs --archive <name...> or a range (--from, --to, --partition)');
  return { from: options.from, to: options.to, partition: options.partition };
}
