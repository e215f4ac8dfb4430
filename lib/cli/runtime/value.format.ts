import { escapeControls } from '../../util/control-chars';

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
