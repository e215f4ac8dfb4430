import type { LoggerService, LogLevel } from '@nestjs/common';
import { escapeControls } from '../../util/control-chars';
import { redactUrlsIn } from '../../util/redact-url';

/**
 * Nest logger for `--verbose`: everything goes to stderr, so stdout keeps
 * only the command's output (a `--json` document must stay parseable).
 * A URL quoted by a library message is shown without its password.
 */
export class StderrLogger implements LoggerService {
  log(message: unknown, ...rest: unknown[]): void {
    this.write('log', message, rest);
  }
  error(message: unknown, ...rest: unknown[]): void {
    this.write('error', message, rest);
  }
  warn(message: unknown, ...rest: unknown[]): void {
    this.write('warn', message, rest);
  }
  debug(message: unknown, ...rest: unknown[]): void {
    this.write('debug', message, rest);
  }
  verbose(message: unknown, ...rest: unknown[]): void {
    this.write('verbose', message, rest);
  }
  fatal(message: unknown, ...rest: unknown[]): void {
    this.write('fatal', message, rest);
  }

  private write(level: LogLevel, message: unknown, rest: unknown[]): void {
    // Nest passes the context (the class name) as the last extra argument; a stack may come before it.
    const context = typeof rest[rest.length - 1] === 'string' ? (rest[rest.length - 1] as string) : undefined;
    const text =
      message instanceof Error ? (message.stack ?? message.message) : typeof message === 'string' ? message : JSON.stringify(message);
    process.stderr.write(
      `[${new Date().toISOString()}] ${level.toUpperCase().padEnd(7)} ${context ? `${context}: ` : ''}${escapeControls(redactUrlsIn(text), true)}\n`,
    );
  }
}
