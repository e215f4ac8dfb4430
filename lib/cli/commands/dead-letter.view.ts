import type { DeadLetter } from '../../wire/dead-letter.codec';
import { formatFields, formatTable } from '../runtime/table.formatter';
import { formatData, formatDate, NONE, truncate } from '../runtime/value.format';

/** Human renderings of dead letters for `dlq list` and `dlq show`. */

export function renderDeadLetters(group: string, letters: readonly DeadLetter[]): string {
  if (letters.length === 0) return `No dead letters in group "${group}".`;
  return formatTable(letters, [
    { header: 'id', value: (d) => d.id },
    { header: 'event', value: (d) => d.event ?? NONE },
    { header: 'key', value: (d) => d.key ?? NONE },
    { header: 'partition', value: (d) => d.partition, align: 'right' },
    { header: 'reason', value: (d) => d.reason },
    { header: 'attempts', value: (d) => d.attempts, align: 'right' },
    { header: 'failed at', value: (d) => formatDate(d.failedAt) },
    { header: 'error', value: (d) => truncate(`${d.error.name}: ${d.error.message}`, 60) },
  ]);
}

export function renderDeadLetter(letter: DeadLetter): string {
  const fields = formatFields([
    ['Dead letter', letter.id],
    ['Group', letter.group],
    ['Event', letter.event ?? NONE],
    ['Event id', letter.eventId ?? NONE],
    ['Key', letter.key ?? NONE],
    ['Partition', letter.partition],
    ['Offset', letter.offset],
    ['Reason', letter.reason],
    ['Attempts', letter.attempts],
    ['First failed', formatDate(letter.firstFailedAt)],
    ['Last failed', formatDate(letter.failedAt)],
    ['Worker', letter.worker],
    ['Error', `${letter.error.name}: ${letter.error.message}`],
  ]);
  const headers = Object.keys(letter.headers).length > 0 ? `\n\nHeaders:\n${indent(JSON.stringify(letter.headers, null, 2))}` : '';
  const data = typeof letter.data === 'string' ? formatData(letter.data) : JSON.stringify(letter.data, null, 2);
  const stack = letter.error.stack ? `\n\nStack:\n${indent(letter.error.stack)}` : '';
  return `${fields}${headers}\n\nData:\n${indent(data)}${stack}`;
}

function indent(text: string): string {
  return text
    .split('\n')
    .map((line) => `  ${line}`)
    .join('\n');
}
