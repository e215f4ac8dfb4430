import type { Command } from 'commander';
import { parseNonNegative } from '../runtime/argument.parser';
import type { CliRunner } from '../runtime/cli.runner';
import { assertConfirmable, confirm } from '../runtime/confirm.prompt';
import { ConfirmationDeclinedError } from '../errors/confirmation-declined.error';
import { CONFIRMATION_NOTE, examples } from '../runtime/help.text';
import { formatDuration, formatList } from '../runtime/value.format';

export function registerPruneStaleCommand(program: Command, runner: CliRunner): void {
  program
    .command('prune-stale')
    .description('remove groups whose members have all been gone for a while, with their offsets, leases and dead letters')
    .option('--stale-ms <ms>', 'gone for longer than this (default: 24 h)', parseNonNegative)
    .option('-y, --yes', 'do not ask for confirmation')
    .addHelpText(
      'after',
      CONFIRMATION_NOTE +
        examples(['eventrail prune-stale', 'eventrail prune-stale --stale-ms 604800000 --yes --json']) +
        '\nA group with a live member is never removed.\n',
    )
    .action(
      runner.action<{ staleMs?: number; yes?: boolean }>(async (ctx, _args, { staleMs, yes }) => {
        assertConfirmable(yes === true, 'prune stale groups');
        const { admin } = await ctx.open();
        const age = staleMs === undefined ? 'the stale-group threshold (24 h by default)' : formatDuration(staleMs);
        if (!(await confirm(yes === true, `Remove every group whose members have all been gone longer than ${age}?`)))
          throw new ConfirmationDeclinedError('prune stale groups');
        const pruned = await admin.pruneStaleGroups(staleMs === undefined ? {} : { staleMs });
        ctx.output.result({ pruned }, () =>
          pruned.length === 0 ? 'No stale groups.' : `Removed ${pruned.length} stale group(s): ${formatList(pruned)}`,
        );
      }),
    );
}
