import type { Command } from 'commander';
import type { CliRunner } from '../runtime/cli.runner';
import { examples } from '../runtime/help.text';
import { renderGroup, renderGroups } from './group.view';

export function registerGroupCommands(program: Command, runner: CliRunner): void {
  program
    .command('groups')
    .description('every consumer group: live members, lag, dead letters, last heartbeat')
    .addHelpText('after', examples(['eventrail groups', 'eventrail groups --json']))
    .action(
      runner.action(async (ctx) => {
        const groups = await (await ctx.open()).admin.groups();
        ctx.output.result(groups, () => renderGroups(groups));
      }),
    );

  program
    .command('group')
    .description("one group's members, and per partition its committed offset, lag and lease owner")
    .argument('<name>', 'consumer group')
    .addHelpText('after', examples(['eventrail group billing', 'eventrail group billing --json']))
    .action(
      runner.action(async (ctx, [name]) => {
        const group = await (await ctx.open()).admin.group(name as string);
        ctx.output.result(group, () => renderGroup(group));
      }),
    );
}
