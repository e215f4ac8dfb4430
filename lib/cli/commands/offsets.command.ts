import type { Command } from 'commander';
import type { OffsetResetResult, OffsetTarget } from '../../admin/admin.types';
import { parseStreamId, parseTime } from '../runtime/argument.parser';
import type { CliRunner } from '../runtime/cli.runner';
import { assertConfirmable, confirm } from '../runtime/confirm.prompt';
import { CliUsageError } from '../errors/cli-usage.error';
import { ConfirmationDeclinedError } from '../errors/confirmation-declined.error';
import { CONFIRMATION_NOTE, examples } from '../runtime/help.text';
import { formatTable } from '../runtime/table.formatter';
import { NONE } from '../runtime/value.format';

interface ResetOptions {
  toStart?: boolean;
  toEnd?: boolean;
  toId?: string;
  toTime?: Date;
  dryRun?: boolean;
  force?: boolean;
  yes?: boolean;
}

export function registerOffsetsCommands(program: Command, runner: CliRunner): void {
  const offsets = program
    .command('offsets')
    .description("a group's committed offsets")
    .addHelpText(
      'after',
      examples(['eventrail offsets reset billing --to-start --dry-run', 'eventrail offsets reset billing --to-end --yes']),
    );

  offsets
    .command('reset')
    .description('move a group to the start or end of the log, to an entry id or to a time (takes exactly one --to-*)')
    .argument('<group>', 'consumer group')
    .option('--to-start', 'handle the whole log again')
    .option('--to-end', 'skip everything in the log now')
    .option('--to-id <id>', 'handle this entry next (in each partition, entries from this id on)', parseStreamId)
    .option('--to-time <time>', 'handle entries published at or after this time next (ISO 8601 or epoch ms)', parseTime)
    .option('--dry-run', 'show the change without making it')
    .option('--force', 'reset although the group has live members: their leases are revoked, they resume from the new offsets')
    .option('-y, --yes', 'do not ask for confirmation')
    .addHelpText(
      'after',
      CONFIRMATION_NOTE +
        examples([
          'eventrail offsets reset billing --to-time 2024-06-01T00:00:00Z --dry-run',
          'eventrail offsets reset billing --to-start --yes',
          'eventrail offsets reset billing --to-end --force --yes --json',
        ]) +
        '\nIdempotency marks of the group are cleared, so the entries are handled again.\nRefused (exit code 1) while the group has live members, unless --force.\n',
    )
    .action(
      runner.action<ResetOptions>(async (ctx, [group], options) => {
        const name = group as string;
        const target = offsetTarget(options);
        const dryRun = options.dryRun === true;
        const force = options.force === true;
        const yes = options.yes === true;
        if (!dryRun) assertConfirmable(yes, `reset the offsets of group "${name}"`);
        const { admin } = await ctx.open();
        if (!dryRun && !yes) {
          ctx.output.notice(renderReset(await admin.resetOffsets(name, target, { dryRun: true, force })));
          if (!(await confirm(false, 'Move the offsets as shown?')))
            throw new ConfirmationDeclinedError(`reset the offsets of group "${name}"`);
        }
        const result = await admin.resetOffsets(name, target, { dryRun, force });
        ctx.output.result(result, () => renderReset(result));
      }),
    );
}

function offsetTarget({ toStart, toEnd, toId, toTime }: ResetOptions): OffsetTarget {
  const targets: OffsetTarget[] = [];
  if (toStart) targets.push('start');
  if (toEnd) targets.push('end');
  if (toId !== undefined) targets.push({ id: toId });
  if (toTime !== undefined) targets.push({ time: toTime });
  if (targets.length !== 1)
    throw new CliUsageError('offsets reset takes exactly one of --to-start, --to-end, --to-id <id>, --to-time <time>');
  return targets[0];
}

function renderReset(result: OffsetResetResult): string {
  const heading = result.dryRun
    ? `Dry run: the offsets of group "${result.group}" would move (nothing changed):`
    : `Offsets of group "${result.group}" moved:`;
  const table = formatTable(result.partitions, [
    { header: 'partition', value: (p) => p.partition, align: 'right' },
    { header: 'from', value: (p) => p.from ?? NONE },
    { header: 'to', value: (p) => p.to },
  ]);
  return `${heading}\n${table}`;
}
