import { escapeControls } from '../../util/control-chars';

/**
 * Plain aligned columns, as kubectl prints them: no borders, a header row in capitals, three spaces between columns.
 * Cells are one line each, escaped before they are measured so the columns stay aligned (see log/control-chars).
 */

export interface Column<T> {
  header: string;
  value: (row: T) => string | number;
  /** Numbers read better right-aligned. @default 'left' */
  align?: 'left' | 'right';
}

const GAP = '   ';

export function formatTable<T>(rows: readonly T[], columns: ReadonlyArray<Column<T>>): string {
  const cells = rows.map((row) => columns.map((column) => escapeControls(String(column.value(row)))));
  const headers = columns.map((column) => column.header.toUpperCase());
  const widths = columns.map((_, i) => Math.max(headers[i].length, ...cells.map((line) => line[i].length)));
  const render = (line: string[]): string =>
    line
      .map((cell, i) => (columns[i].align === 'right' ? cell.padStart(widths[i]) : cell.padEnd(widths[i])))
      .join(GAP)
      .trimEnd();
  return [render(headers), ...cells.map(render)].join('\n');
}

/** `Label:  value` lines with the values aligned, for one object; each value stays on its line. */
export function formatFields(fields: ReadonlyArray<readonly [string, string | number]>): string {
  const width = Math.max(...fields.map(([label]) => label.length)) + 1;
  return fields.map(([label, value]) => `${`${label}:`.padEnd(width)}  ${escapeControls(String(value))}`).join('\n');
}
