import { escapeControls } from '../util/control-chars';

/** Formatting of single values for the human (non-`--json`) output. */

/** Placeholder for a missing value in tables. */
export const NONE = '-';

export function formatDate(date: Date | null | undefined): string {
  return date instanceof Date && !Number.isNaN(date.getTime()) ? date.toISOString() : NONE;
}

/** Lag is counted up to a cap; past it the count is a lower bound, shown as `10000+`. */
export function formatLag(lag: number, capped: boolean): string {
  return capped ? `${lag}+` : String(lag);
}

export function formatBytes(bytes: number | null): string {
  if (bytes === null) return NONE;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${units[unit]}`;
}

export function formatDuration(ms: number): string {
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000}d`;
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1_000 === 0) return `${ms / 1_000}s`;
  return `${ms}ms`;
}

/** Compact JSON of a payload, cut to `max` characters for a table cell or a tail line. */
export function formatData(data: unknown, max = Infinity): string {
  const text = typeof data === 'string' ? data : (JSON.stringify(data) ?? String(data));
  return truncate(text, max);
}

/** One line of at most `max` characters, control characters escaped (counted as shown). */
export function truncate(text: string, max: number): string {
  const oneLine = escapeControls(text.replace(/\s*\n\s*/g, ' '));
  return oneLine.length > max ? `${oneLine.slice(0, Math.max(0, max - 1))}…` : oneLine;
}

/** Names read from Redis (groups, event types) on one line: `a, b, c`. */
export function formatList(names: readonly string[]): string {
  return escapeControls(names.join(', '));
}

/** `0,1,2,3,7` as `0-3,7`. */
export function formatPartitions(partitions: readonly number[]): string {
  const ranges: string[] = [];
  for (let i = 0; i < partitions.length; i++) {
    const start = partitions[i];
    while (i + 1 < partitions.length && partitions[i + 1] === partitions[i] + 1) i++;
    ranges.push(start === partitions[i] ? String(start) : `${start}-${partitions[i]}`);
  }
  return ranges.join(',') || NONE;
}

// The password of `scheme://user:password@host`, in any text: up to the last `@` before the host, as URL parsing
// reads it (so a password may hold `@` and `,`). Not `redis://[user:password@]host`, a usage hint. `?password=`
// is read by ioredis too.
const PASSWORD_IN_TEXT = /\b([a-z][a-z\d+.-]*:\/\/[^\s/?#:[\]]*:)[^\s/?#]*@/gi;
const PASSWORD_PARAM = /([?&]password=)[^&#\s"']*/gi;

/**
 * A Redis URL without its password, for messages. A URL that does not parse
 * loses everything from `//` to its last `@`, the password among it.
 */
export function redactUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url.replace(/\/\/.*@/, '//***@').replace(PASSWORD_PARAM, '$1***');
  }
  if (parsed.password) parsed.password = '***';
  if (parsed.searchParams.has('password')) parsed.searchParams.set('password', '***');
  return parsed.toString().replace(/\/$/, '');
}

/** Whether `redactUrl` hides something in `url`. */
export function hasPassword(url: string): boolean {
  try {
    const parsed = new URL(url);
    return parsed.password !== '' || parsed.searchParams.has('password');
  } catch {
    return /\/\/.*@|[?&]password=/i.test(url);
  }
}

/**
 * `text` with the password of every URL in it shown as `***`: the last guard
 * of error messages and logs, which may quote a URL the CLI did not redact
 * (a library message, a mistyped command echoed by the parser).
 */
export function redactUrlsIn(text: string): string {
  return text.replace(PASSWORD_IN_TEXT, '$1***@').replace(PASSWORD_PARAM, '$1***');
}
