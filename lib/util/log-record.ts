import { inspect } from 'node:util';

/** The fields a consumer log line names separately, for log search (any may be absent). */
export interface LogFields {
  group?: string;
  partition?: number;
  eventId?: string;
  event?: string;
  offset?: string;
  /** An error's stack: a field for JSON loggers, printed under the text on the console. */
  stack?: string;
  /** Anything else a line wants to carry as a field (`attempt`, `delayMs`, `reason`, ...). */
  [field: string]: unknown;
}

/**
 * A log line with its identifiers as separate fields and its readable text
 * in `msg`, passed to Nest's `Logger` as the message object. Loggers that
 * spread an object message into the record (nestjs-pino, Nest's
 * `ConsoleLogger` with `json: true`) get `msg` and every field as JSON
 * properties; the text console and any logger that calls `String()` on the
 * message see only `msg`, so the line reads as it always did.
 */
export class LogRecord {
  readonly msg!: string;
  readonly stack?: string;

  constructor(msg: string, fields: LogFields) {
    // Own enumerable properties: nestjs-pino copies them with Object.assign. A field left undefined is left out.
    for (const [key, value] of Object.entries(fields)) if (value !== undefined) (this as Record<string, unknown>)[key] = value;
    (this as { msg: string }).msg = msg;
  }

  toString(): string {
    return this.msg;
  }

  /** `ConsoleLogger` inspects a non-string message: a class instance shows as what this returns, without an `Object(n)` dump. */
  [inspect.custom](): string {
    return this.stack ? `${this.msg}\n${this.stack}` : this.msg;
  }
}

/** `new LogRecord(msg, fields)`, for short call sites. */
export function logRecord(msg: string, fields: LogFields): LogRecord {
  return new LogRecord(msg, fields);
}
