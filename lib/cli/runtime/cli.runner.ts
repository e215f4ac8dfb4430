import { Command, CommanderError } from 'commander';
import { CliContext } from './cli.context';
import type { GlobalOptions } from './global-options';
import { CliOutput } from './cli.output';
import { CliUsageError } from '../errors/cli-usage.error';
import { ExitCode, exitCodeFor, messageFor } from './exit-code';

/** A command's work: it prints its result through `ctx.output` and may return a non-zero exit code. */
export type CommandHandler<O extends object> = (ctx: CliContext, args: unknown[], options: O) => Promise<ExitCode | void>;

/**
 * Runs a parsed command line and turns its outcome into an exit code: errors
 * from the handlers are printed once (`eventrail: <message>`) and mapped by
 * `exitCodeFor`; commander's own errors (unknown command or option, missing
 * argument) are usage errors.
 */
export class CliRunner {
  private exitCode: ExitCode = ExitCode.Ok;

  /** Wraps a handler as a commander action: a context per run, errors reported, the connection always closed. */
  action<O extends object>(handler: CommandHandler<O>): (...params: unknown[]) => Promise<void> {
    return async (...params) => {
      const command = params[params.length - 1] as Command;
      const ctx = new CliContext(command.optsWithGlobals<GlobalOptions>(), typedGlobals(command));
      try {
        this.exitCode = (await handler(ctx, command.processedArgs, command.opts<O>())) ?? ExitCode.Ok;
      } catch (error) {
        ctx.output.error(error);
        this.exitCode = exitCodeFor(error);
      } finally {
        await ctx.close().catch((error: unknown) => {
          // The result is already out; a failed close only matters when nothing else failed.
          if (this.exitCode === ExitCode.Ok) {
            ctx.output.error(error);
            this.exitCode = ExitCode.Failed;
          }
        });
      }
    };
  }

  async run(program: Command, argv: readonly string[]): Promise<ExitCode> {
    try {
      await program.parseAsync([...argv], { from: 'user' });
      return this.exitCode;
    } catch (error) {
      if (!(error instanceof CommanderError)) throw error;
      // --help, --version, `help`: done.
      if (error.exitCode === 0) return ExitCode.Ok;
      // Help printed because a command group was called without a command: the help is the message.
      if (error.code !== 'commander.help') new CliOutput(argv.includes('--json')).error(new CliUsageError(messageFor(error)));
      return ExitCode.Usage;
    }
  }
}

/** The program's options given on the command line (wherever they stood), leaving out defaults. */
function typedGlobals(command: Command): Partial<GlobalOptions> {
  let program = command;
  while (program.parent) program = program.parent;
  const typed: Record<string, unknown> = {};
  for (const option of program.options) {
    const key = option.attributeName();
    if (program.getOptionValueSource(key) === 'cli') typed[key] = program.getOptionValue(key) as unknown;
  }
  return typed as Partial<GlobalOptions>;
}
