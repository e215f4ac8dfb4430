import type { Command } from 'commander';
import { collectHeader, parseCount, parseJsonData, parseNonNegative } from '../runtime/argument.parser';
import type { CliRunner } from '../runtime/cli.runner';
import { examples } from '../runtime/help.text';
import { formatFields } from '../runtime/table.formatter';

interface PublishFlags {
  key?: string;
  partition?: number;
  id?: string;
  header?: Record<string, string>;
  partitions?: number;
}

export function registerPublishCommand(program: Command, runner: CliRunner): void {
  program
    .command('publish')
    .description('append one event to the log (creates the log when none exists at the prefix)')
    .argument('<event>', 'event type, such as order.created')
    .argument('<json>', 'event data as JSON; "-" reads it from stdin')
    .option('--key <key>', 'ordering key: picks the partition, events with the same key are handled in order')
    .option('--partition <n>', 'partition of a keyless event (default 0)', parseNonNegative)
    .option('--id <id>', 'event id instead of a fresh UUIDv7')
    .option('--header <name=value>', 'a header (repeatable)', collectHeader)
    .option('--partitions <n>', 'partition count of a new log (default: the library default); an existing log keeps its own', parseCount)
    .addHelpText(
      'after',
      examples([
        `eventrail publish order.created '{"orderId":"o-1","total":42}' --key o-1`,
        `eventrail publish order.created - --key o-1 < order.json`,
        `eventrail --prefix orders publish order.created '{}' --partitions 8 --json`,
      ]),
    )
    .action(
      runner.action<PublishFlags>(async (ctx, [event, json], flags) => {
        const data = parseJsonData(json === '-' ? await readStdin() : (json as string));
        const { publisher } = await ctx.open({ createLog: { partitions: flags.partitions } });
        const result = await publisher.publish(event as string, data, {
          key: flags.key,
          partition: flags.partition,
          id: flags.id,
          headers: flags.header,
        });
        ctx.output.result(result, () =>
          formatFields([
            ['Published', event as string],
            ['Event id', result.id],
            ['Partition', result.partition],
            ['Offset', result.offset],
            ...(result.duplicate ? [['Duplicate', 'yes: already appended within the dedup window'] as const] : []),
          ]),
        );
      }),
    );
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}
