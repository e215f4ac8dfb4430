#!/usr/bin/env node
import { createProgram } from './cli.program';
import { CliRunner } from './runtime/cli.runner';
import { ExitCode } from './runtime/exit-code';
import { escapeControls } from '../util/control-chars';
import { redactUrlsIn } from '../util/redact-url';

// `eventrail tail | head`: once the reader is gone there is nobody left to print for; end quietly, not with an EPIPE stack.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(ExitCode.Ok);
  throw error;
});
// `eventrail ... 2>&1 >out | head -1`, `2>>job.log` on a full disk: when stderr cannot be written (EPIPE, ECONNRESET, ENOSPC, ...)
// its notices and logs reach nobody, and there is no other channel to say so: the command goes on, and its result (stdout)
// and exit code stay. Unhandled, the first write there killed it, before a replay had started.
process.stderr.on('error', () => undefined);

/** Entry point of the `eventrail` bin. */
async function main(): Promise<void> {
  let code: number;
  try {
    const runner = new CliRunner();
    code = await runner.run(createProgram(runner), process.argv.slice(2));
  } catch (error) {
    const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
    process.stderr.write(`eventrail: unexpected failure: ${escapeControls(redactUrlsIn(text), true)}\n`);
    code = ExitCode.Failed;
  }
  // Exit explicitly once the output is flushed: a reconnecting socket or a library timer must not keep a finished command alive.
  process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
}

void main();
