import { redactUrl, redactUrlsIn } from '../util/redact-url';
import { EventrailError } from './eventrail.error';

/**
 * A module, group or decorator option is not valid. Thrown at startup.
 *
 * The message shows the value given, and options carry secrets (a Redis URL's password, S3 credentials,
 * a dashboard token), while errors end up in logs. So the value is shown redacted, structurally: every
 * value under a secret-named key (`password`, `secretAccessKey`, `token`, `credentials`, `auth`, ... in
 * any case, at any depth) is `***`, and every string has the password of a URL in it hidden (the rule of
 * `redactUrl`). The `value` field keeps what was given, but is not enumerable, so a logger that
 * serializes an error's fields does not print it.
 */
export class InvalidOptionError extends EventrailError {
  /** The option's path, such as `consumer.concurrency`; redacted too, as it may hold a key the user chose (a group name). */
  readonly option: string;
  declare readonly value: unknown;

  /** `shown` replaces the described value in the message (an unknown option shows no value at all). */
  constructor(
    option: string,
    value: unknown,
    readonly expected: string,
    shown: string = describe(value),
  ) {
    // `@OnEvent on Class.method` is a path too: only `user:password@` in it is hidden.
    const path = /:[^@]*@/.test(option) ? redactString(option) : redactUrlsIn(option);
    super(redactUrlsIn(`Invalid eventrail option ${path}: got ${shown}, expected ${expected}`));
    this.option = path;
    Object.defineProperty(this, 'value', { value, enumerable: false });
  }
}

/** Keys whose values are secrets wherever they appear in an option value. */
const SECRET_KEY =
  /passw|^pass$|^pwd$|passphrase|secret|token|credential|auth|access.?key|api.?key|private.?key|^key$|^pfx$|cookie|signature/i;
const MASK = '***';
/** Nesting shown before `...`: enough to see what is wrong, and a bound on a cyclic or huge value. */
const MAX_DEPTH = 6;

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(redactString(value));
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value !== 'object') return typeof value;
  if (value instanceof Date) return describeDate(value);
  try {
    return JSON.stringify(redacted(value, 0, new Set())) ?? typeof value;
  } catch {
    return typeof value;
  }
}

/** A copy of `value` that JSON can show: secrets masked, URLs redacted, class instances named, cycles cut. */
function redacted(value: unknown, depth: number, seen: Set<object>): unknown {
  if (typeof value === 'string') return redactString(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null || typeof value !== 'object') return value;
  if (value instanceof Date) return describeDate(value);
  if (seen.has(value)) return '(cycle)';
  if (depth >= MAX_DEPTH) return '...';
  const proto = Object.getPrototypeOf(value) as object | null;
  if (!Array.isArray(value) && proto !== Object.prototype && proto !== null) {
    // A client, a Buffer, a Map: its fields are not options, and may hold a connection's password.
    return `an instance of ${(value.constructor as { name?: string } | undefined)?.name || 'an unnamed class'}`;
  }
  seen.add(value);
  try {
    if (Array.isArray(value)) return value.map((item) => redacted(item, depth + 1, seen));
    const copy: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) copy[key] = isSecretKey(key) ? mask(item) : redacted(item, depth + 1, seen);
    return copy;
  } finally {
    seen.delete(value);
  }
}

export function isSecretKey(key: string): boolean {
  return SECRET_KEY.test(key);
}

/** A secret is shown as `***`; that it is missing or switched off (`null`, `false`) is not a secret. */
function mask(value: unknown): unknown {
  return value === undefined || value === null || typeof value === 'boolean' ? value : MASK;
}

/** A string as a whole URL (`user:password@host` with no scheme included), then any URL inside it. */
function redactString(text: string): string {
  return redactUrlsIn(/@|password=/i.test(text) ? redactUrl(text) : text);
}

function describeDate(date: Date): string {
  return Number.isNaN(date.getTime()) ? 'an invalid Date' : `Date(${date.toISOString()})`;
}
