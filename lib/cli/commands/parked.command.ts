import { Command } from 'commander';
import type { ParkedKey } from '../../admin/admin.types';
import type { EventrailAdmin } from '../../admin/eventrail-admin';
import type { CliRunner } from '../runtime/cli.runner';
import { assertConfirmable, confirm } from '../runtime/confirm.prompt';
import { ConfirmationDeclinedError } from '../errors/confirmation-declined.error';
import { ParkedKeyNotFoundError } from '../errors/parked-key-not-found.error';
import { CONFIRMATION_NOTE, examples } from '../runtime/help.text';
import { describeKey, renderParkedKeys } from './parked.view';

/** Retry and give-up are commands left for the partitions' owners, which apply them when the signal reaches them. */
const APPLIED_NOTE =
  '\nThe owner of each partition applies it when the signal reaches it (at once while a worker runs the group), ' +
  'or when a worker next takes the partition.\n';

export function registerParkedCommands(program: Command, runner: CliRunner): void {
  const parked = program
    .command('parked')
    .description("a group's parked keys (ordering 'key' or 'unordered'): list, retry now, give a head up")
    .addHelpText(
      'after',
      examples([
        'eventrail parked list payments',
        'eventrail parked retry payments --key account-42',
        'eventrail parked give-up payments --key account-42',
      ]),
    );

  for (const register of [registerList, registerRetry, registerGiveUp]) register(parked, runner);
}

/** `parked list`: every parked line of the group, by partition then oldest first. */
function registerList(parked: Command, runner: CliRunner): void {
  parked
    .command('list')
    .description('every parked key: its partition, head, how many messages wait, attempts, next attempt and last error')
    .argument('<group>', 'consumer group')
    .addHelpText('after', examples(['eventrail parked list payments', 'eventrail parked list payments --json']))
    .action(
      runner.action(async (ctx, [group]) => {
        const lines = await (await ctx.open()).admin.parkedKeys(group as string);
        ctx.output.result(lines, () => renderParkedKeys(group as string, lines));
      }),
    );
}

/** `parked retry`: every line of the group, or the line of `--key`, tried now rather than at its next tier. */
function registerRetry(parked: Command, runner: CliRunner): void {
  parked
    .command('retry')
    .description('try parked keys again now instead of at their next attempt: every parked key of the group, or the one of --key')
    .argument('<group>', 'consumer group')
    .option('--key <key>', 'only this key ("" for the keyless line)')
    .addHelpText(
      'after',
      examples(['eventrail parked retry payments', 'eventrail parked retry payments --key account-42 --json']) + APPLIED_NOTE,
    )
    .action(
      runner.action<{ key?: string }>(async (ctx, [group], { key }) => {
        const name = group as string;
        const { admin } = await ctx.open();
        const lines = await matching(admin, name, key);
        const partitions = lines.length === 0 ? 0 : await admin.retryParked(name, key === undefined ? {} : { key });
        // A named line released by its owner between the look and the command: nothing was asked for.
        if (key !== undefined && partitions === 0) throw new ParkedKeyNotFoundError(name, key);
        const keys = partitions === 0 ? 0 : lines.length;
        ctx.output.result({ group: name, key: key ?? null, keys, partitions }, () =>
          keys === 0
            ? `No parked keys in group "${name}".`
            : `Retrying ${key === undefined ? `${keys} parked key(s)` : describeKey(key)} of group "${name}" now.`,
        );
      }),
    );
}

/** `parked give-up`: the head of one key's line dead-lettered now; asks first unless `--yes`. */
function registerGiveUp(parked: Command, runner: CliRunner): void {
  parked
    .command('give-up')
    .description("dead-letter the head of a key's parked line now (reason retries-exhausted); the key's next message is tried at once")
    .argument('<group>', 'consumer group')
    .requiredOption('--key <key>', 'the parked key ("" for the keyless line)')
    .option('-y, --yes', 'do not ask for confirmation')
    .addHelpText(
      'after',
      CONFIRMATION_NOTE +
        examples(['eventrail parked give-up payments --key account-42', 'eventrail parked give-up payments --key "" --yes']) +
        APPLIED_NOTE,
    )
    .action(
      runner.action<{ key: string; yes?: boolean }>(async (ctx, [group], { key, yes }) => {
        const name = group as string;
        const operation = `give up the parked head of ${describeKey(key)} in group "${name}"`;
        assertConfirmable(yes === true, operation);
        const { admin } = await ctx.open();
        const [line] = await matching(admin, name, key);
        if (!line) throw new ParkedKeyNotFoundError(name, key);
        const head = `${line.offset}${line.eventId === null ? '' : ` (event ${line.eventId})`}`;
        if (
          !(await confirm(
            yes === true,
            `Dead-letter ${head}, the head of ${describeKey(key)} in group "${name}" (${line.count} message(s) parked)?`,
          ))
        )
          throw new ConfirmationDeclinedError(operation);
        const partitions = await admin.giveUpParked(name, { key });
        // Released or given up by its owner between the look and the command: nothing was asked for.
        if (partitions === 0) throw new ParkedKeyNotFoundError(name, key);
        ctx.output.result(
          { group: name, key, head: line.offset, eventId: line.eventId, partitions },
          () =>
            `Giving up ${head}, the head of ${describeKey(key)} in group "${name}": it is dead-lettered and the key's next message is tried at once.`,
        );
      }),
    );
}

/** The group's parked lines, or the line of `key`; a named key that is not parked is an error. */
async function matching(admin: EventrailAdmin, group: string, key: string | undefined): Promise<ParkedKey[]> {
  const lines = (await admin.parkedKeys(group)).filter((line) => key === undefined || line.key === key);
  if (key !== undefined && lines.length === 0) throw new ParkedKeyNotFoundError(group, key);
  return lines;
}
