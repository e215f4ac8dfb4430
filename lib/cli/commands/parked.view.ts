import type { ParkedKey } from '../../admin/admin.types';
import { formatTable } from '../runtime/table.formatter';
import { formatDate, NONE, truncate } from '../runtime/value.format';

/** Human rendering of parked lines for `parked list`. */

/** How a keyless line (key `''`) is shown: its messages are the partition's keyless sequence. */
export const KEYLESS = '(keyless)';

export function renderParkedKeys(group: string, lines: readonly ParkedKey[]): string {
  if (lines.length === 0) return `No parked keys in group "${group}".`;
  return formatTable(lines, [
    { header: 'key', value: (p) => (p.key === '' ? KEYLESS : p.key) },
    { header: 'partition', value: (p) => p.partition, align: 'right' },
    { header: 'head', value: (p) => p.offset },
    { header: 'event', value: (p) => p.event ?? NONE },
    { header: 'waiting', value: (p) => p.count, align: 'right' },
    { header: 'attempts', value: (p) => p.attempts, align: 'right' },
    { header: 'first failed', value: (p) => formatDate(p.firstFailedAt) },
    { header: 'next attempt', value: (p) => formatDate(p.nextAttemptAt) },
    { header: 'error', value: (p) => truncate(p.error, 60) },
  ]);
}

/** A key as a message names it: quoted, or the keyless line. */
export function describeKey(key: string): string {
  return key === '' ? 'the keyless line' : `key "${key}"`;
}
