import { createInterface } from 'node:readline/promises';
import { CliUsageError } from '../errors/cli-usage.error';
import { escapeControls } from '../../util/control-chars';

/**
 * Confirmation of destructive commands: `--yes`, or a y/N question when
 * stdin is a terminal. Without a terminal nobody can answer, so the command
 * refuses at once (before connecting) rather than wait on stdin.
 */
export function assertConfirmable(yes: boolean, operation: string): void {
  if (yes || process.stdin.isTTY) return;
  throw new CliUsageError(`Refusing to ${operation} without confirmation: pass --yes (stdin is not a terminal to ask)`);
}

/** True with `--yes`; otherwise asks on stderr and reads the answer from stdin. */
export async function confirm(yes: boolean, question: string): Promise<boolean> {
  if (yes) return true;
  const prompt = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = await prompt.question(`${escapeControls(question)} [y/N] `);
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    prompt.close();
  }
}
