import { describeError } from './exit-code';

/**
 * Everything the CLI prints. Results go to stdout: one JSON document with
 * `--json`, else human text. Notices, progress and errors go to stderr, so a
 * pipe only ever sees the result.
 */
export class CliOutput {
  constructor(readonly json: boolean) {}

  /** The result of a command: `value` as JSON, or the human rendering of it. */
  result(value: unknown, human: () => string): void {
    if (this.json) process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
    else this.line(human());
  }

  /** One JSON object per line (`tail --json`), so a consumer can parse line by line. */
  jsonLine(value: unknown): void {
    process.stdout.write(`${JSON.stringify(value)}\n`);
  }

  line(text: string): void {
    process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
  }

  /** A message about the run rather than its result (stderr). */
  notice(text: string): void {
    process.stderr.write(`${text}\n`);
  }

  /** One line on stderr; with `--json` also `{ "error": { name, message } }` on stdout for scripts. */
  error(error: unknown): void {
    const message = describeError(error);
    process.stderr.write(`eventrail: ${message}\n`);
    if (this.json) {
      const name = error instanceof Error ? error.name : 'Error';
      process.stdout.write(`${JSON.stringify({ error: { name, message } }, null, 2)}\n`);
    }
  }
}
