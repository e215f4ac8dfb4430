import { messageFor } from './exit-code';
import { escapeControls, escapeJsonControls } from '../../util/control-chars';
import { redactUrlsIn } from '../../util/redact-url';

/**
 * Everything the CLI prints. Results go to stdout: one JSON document with
 * `--json`, else human text. Notices, progress and errors go to stderr, so a
 * pipe only ever sees the result.
 *
 * Every write passes through here, so this is where untrusted text is made
 * inert for a terminal: human text has its control characters escaped (line
 * breaks kept; renderings escape the line breaks of single-line values
 * themselves), JSON has DEL and C1 escaped as well (JSON.stringify escapes C0).
 * Error messages also lose the passwords of URLs they quote.
 */
export class CliOutput {
  constructor(readonly json: boolean) {}

  /** The result of a command: `value` as JSON, or the human rendering of it. */
  result(value: unknown, human: () => string): void {
    if (this.json) process.stdout.write(`${toJson(value, 2)}\n`);
    else this.line(human());
  }

  /** One JSON object per line (`tail --json`), so a consumer can parse line by line. */
  jsonLine(value: unknown): void {
    process.stdout.write(`${toJson(value)}\n`);
  }

  line(text: string): void {
    const safe = escapeControls(text, true);
    process.stdout.write(safe.endsWith('\n') ? safe : `${safe}\n`);
  }

  /** A message about the run rather than its result (stderr). */
  notice(text: string): void {
    process.stderr.write(`${escapeControls(text, true)}\n`);
  }

  /** One line on stderr; with `--json` also `{ "error": { name, message } }` on stdout for scripts. */
  error(error: unknown): void {
    const message = redactUrlsIn(messageFor(error));
    process.stderr.write(`eventrail: ${escapeControls(message, true)}\n`);
    if (this.json) {
      const name = error instanceof Error ? error.name : 'Error';
      process.stdout.write(`${toJson({ error: { name, message } }, 2)}\n`);
    }
  }
}

function toJson(value: unknown, indent?: number): string {
  return escapeJsonControls(JSON.stringify(value, null, indent));
}
