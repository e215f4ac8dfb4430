import type { Command } from 'commander';
import type { GroupLag } from '../../metrics/group-lag';
import { GroupLagReader, type LagReport } from '../../metrics/group-lag.reader';
import type { CliRunner } from '../runtime/cli.runner';
import { examples } from '../runtime/help.text';
import { formatTable } from '../runtime/table.formatter';
import { formatLag } from '../runtime/value.format';

export function registerLagCommand(program: Command, runner: CliRunner): void {
  program
    .command('lag')
    .description("each group's lag, parked messages, live members and useful workers, read from Redis (no worker needed)")
    .option('--group <groups...>', 'only these groups (an unknown one fails with exit code 1)')
    .addHelpText(
      'after',
      examples(['eventrail lag', 'eventrail lag --group billing --json', "eventrail lag --json | jq '.groups.billing.lag'"]) +
        '\nUseful workers: partitions with work, the most workers a group can keep busy now (never more than the partitions).\n',
    )
    .action(
      runner.action<{ group?: string[] }>(async (ctx, _args, { group }) => {
        const reader = new GroupLagReader((await ctx.open()).admin);
        const lags = group ? await Promise.all([...new Set(group)].map((name) => reader.group(name))) : await reader.read();
        const report: LagReport = { time: new Date().toISOString(), groups: Object.fromEntries(lags.map((lag) => [lag.group, lag])) };
        ctx.output.result(report, () => renderLag(lags));
      }),
    );
}

function renderLag(lags: readonly GroupLag[]): string {
  if (lags.length === 0) return 'No consumer groups.';
  return formatTable(lags, [
    { header: 'group', value: (l) => l.group },
    { header: 'lag', value: (l) => formatLag(l.lag, l.lagCapped), align: 'right' },
    { header: 'parked', value: (l) => l.parked, align: 'right' },
    { header: 'members', value: (l) => l.members, align: 'right' },
    { header: 'useful workers', value: (l) => l.usefulWorkers, align: 'right' },
    { header: 'partitions', value: (l) => l.partitions, align: 'right' },
  ]);
}
