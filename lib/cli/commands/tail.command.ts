import type { Command } from 'commander';
import type { LogEntry } from '../../admin/admin.types';
import type { CliRunner } from '../runtime/cli.runner';
import { CliUsageError } from '../errors/cli-usage.error';
import { examples } from '../runtime/help.text';
import { escapeControls } from '../../util/control-chars';
import { formatData, formatDate, formatList } from '../runtime/value.format';

export function registerTailCommand(program: Command, runner: CliRunner): void {
  program
    .command('tail')
    .description('print entries as they are appended to any partition, until Ctrl-C')
    .option('--event <types...>', 'only these event types')
    .option('--group <group>', 'only the event types this group has handlers for')
    .addHelpText(
      'after',
      examples(['eventrail tail', 'eventrail tail --event order.created order.paid', 'eventrail tail --group billing --json | jq .data']) +
        '\nStarts at the end of the log: only entries appended after it started are printed. Stops with exit code 0 on SIGINT or SIGTERM.\n',
    )
    .action(
      runner.action<{ event?: string[]; group?: string }>(async (ctx, _args, options) => {
        const session = await ctx.open();
        const { admin } = session;
        const events = await selectedEvents(options, async (group) => (await admin.group(group)).events);

        const stopping = new AbortController();
        const stop = (): void => stopping.abort();
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
        try {
          const filter = events ? `events ${formatList(events)}` : 'every event';
          // Printed once each partition's end is known: from then on no appended entry is missed. Tests wait for it.
          const onListening = (): void =>
            ctx.output.notice(`Tailing "${session.prefix}" (${session.partitions} partition(s), ${filter}); Ctrl-C to stop`);
          for await (const entry of admin.follow({ events, signal: stopping.signal, onListening })) {
            if (ctx.output.json) ctx.output.jsonLine(entry);
            else ctx.output.line(renderEntry(entry));
          }
        } finally {
          process.removeListener('SIGINT', stop);
          process.removeListener('SIGTERM', stop);
        }
      }),
    );
}

/** `--event` types, narrowed to the group's when `--group` is given too; undefined for every event. */
async function selectedEvents(
  { event, group }: { event?: string[]; group?: string },
  groupEvents: (group: string) => Promise<string[]>,
): Promise<string[] | undefined> {
  if (group === undefined) return event;
  const handled = await groupEvents(group);
  const events = event ? handled.filter((type) => event.includes(type)) : handled;
  // An empty list would mean "every event" to follow(): refuse instead of printing what was filtered out.
  if (events.length === 0)
    throw new CliUsageError(`Group "${group}" has no handlers${event ? ` for ${event.join(', ')}` : ''}: nothing to tail`);
  return events;
}

/** One entry, one line: a line break in a key or an event name is escaped, so it cannot forge another entry. */
function renderEntry(entry: LogEntry): string {
  return escapeControls(entryLine(entry));
}

function entryLine(entry: LogEntry): string {
  const where = `p${entry.partition}  ${entry.offset}`;
  if (entry.malformed !== null)
    return `${formatDate(entry.publishedAt)}  ${where}  MALFORMED (${entry.malformed})  ${formatData(entry.fields ?? entry.data)}`;
  const key = entry.key === null ? '' : `  key=${entry.key}`;
  const to = entry.to === null ? '' : `  to=${entry.to}`;
  return `${formatDate(entry.publishedAt)}  ${where}  ${entry.event ?? '-'}  id=${entry.id ?? '-'}${key}${to}  ${formatData(entry.data)}`;
}
