/** Shared pieces of `--help` text. */

export function examples(lines: readonly string[]): string {
  return `\nExamples:\n${lines.map((line) => `  $ ${line}`).join('\n')}\n`;
}

export const CONFIRMATION_NOTE =
  '\nDestructive: asks for confirmation when stdin is a terminal; otherwise pass --yes (without it the command refuses, exit code 2).\n';
