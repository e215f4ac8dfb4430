// A group's parked keys (ordering 'key' or 'unordered'): per key the line waiting behind a failing head, with
// the write actions (retry now, give the head up), each confirmed in a dialog and reported in a toast.
// Read-only dashboards show no write controls.

import { api } from './api.js';
import { confirmAction, h, toast } from './dom.js';
import { num } from './format.js';
import { enc, eventHref } from './routes.js';
import { button, mono, table, when } from './widgets.js';

/** `parked` is what `api/groups/<group>/parked` answered; `refreshAll` refetches the page after a write. */
export function parkedPanel(group, parked, { readOnly, refreshAll }) {
  const name = (p) => (p.key === '' ? 'the keyless line' : `key "${p.key}"`);

  /** Asks, runs a write, reports the result in a toast and refreshes. */
  async function act({ title, message, confirmLabel, run, done }) {
    if (!(await confirmAction(title, message, confirmLabel))) return;
    try {
      await run();
      toast(done);
    } catch (error) {
      if (error.status !== 401) toast(`${title} failed: ${error.message}`, 'error');
    }
    await refreshAll();
  }

  const retry = (p) =>
    act({
      title: p ? 'Retry parked key' : 'Retry all parked keys',
      message: p
        ? `Try the head of ${name(p)} in group "${group}" now, instead of ${when(p.nextAttemptAt).textContent}?`
        : `Try the heads of all ${num(parked.length)} parked keys of group "${group}" now, instead of at their next attempt?`,
      confirmLabel: 'Retry',
      run: () => api(`groups/${enc(group)}/parked/retry`, { method: 'POST', body: p ? { key: p.key } : {} }),
      done: p ? `Retrying ${name(p)}` : `Retrying ${num(parked.length)} parked keys`,
    });

  const giveUp = (p) =>
    act({
      title: 'Give up parked head',
      message:
        `Dead-letter ${p.offset}, the head of ${name(p)} in group "${group}"` +
        `${p.count > 1 ? ` (${num(p.count - 1)} more wait behind it and go next)` : ''}? It can be replayed from the dead letters.`,
      confirmLabel: 'Give up',
      run: () => api(`groups/${enc(group)}/parked/give-up`, { method: 'POST', body: { key: p.key } }),
      done: `Gave up the head of ${name(p)}`,
    });

  const columns = [
    { label: 'Key', cell: (p) => (p.key === '' ? h('span', { class: 'muted' }, '(keyless)') : mono(p.key)) },
    { label: 'Partition', cell: (p) => `P${p.partition}`, class: 'num' },
    { label: 'Head', cell: (p) => h('a', { href: eventHref(p.partition, p.offset), class: 'mono' }, p.event ?? p.offset) },
    { label: 'Waiting', cell: (p) => num(p.count), class: 'num' },
    { label: 'Attempts', cell: (p) => num(p.attempts), class: 'num' },
    { label: 'Next attempt', cell: (p) => when(p.nextAttemptAt) },
    { label: 'Error', cell: (p) => h('span', { class: 'error-text', title: p.error }, p.error), class: 'grow' },
    readOnly
      ? null
      : {
          label: '',
          cell: (p) => [
            button('Retry', () => retry(p), { testid: 'parked-retry', kind: 'small' }),
            button('Give up', () => giveUp(p), { testid: 'parked-give-up', kind: 'small button-danger' }),
          ],
          class: 'actions',
        },
  ].filter(Boolean);

  const rows = table({
    columns,
    rows: parked,
    testid: 'parked-table',
    rowTestid: 'parked-row',
    empty: "No parked keys. With ordering 'key', a message that keeps failing waits here with the later messages of its key.",
  });
  for (const [i, row] of [...rows.querySelectorAll('tbody tr')].entries()) row.dataset.key = parked[i].key;
  return h(
    'section',
    { testid: 'parked-panel' },
    h(
      'div',
      { class: 'toolbar' },
      h('h2', {}, 'Parked keys'),
      h('span', { class: 'spacer' }),
      readOnly || parked.length === 0 ? null : button('Retry all', () => retry(null), { testid: 'parked-retry-all' }),
    ),
    rows,
  );
}
