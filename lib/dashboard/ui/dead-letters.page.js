// A group's dead letters: a list to select from, a panel with one letter's error and payload, and the write actions
// (replay, purge), each confirmed in a dialog and reported in a toast. Read-only dashboards show no write controls.

import { api, PAGE_SIZE } from './api.js';
import { confirmAction, fill, h, toast } from './dom.js';
import { dateTime, json, num } from './format.js';
import { enc, eventHref, groupHref } from './routes.js';
import { button, crumbs, errorText, field, mono, notice, table, when } from './widgets.js';

/** Largest page re-fetched on refresh, so loaded rows stay in place. */
const MAX_REFRESH_COUNT = 500;

/** `refreshAll` refetches the overview and this page after a write. */
export function deadLettersPage(group, { readOnly, refreshAll }) {
  const selected = new Set();
  let items = [];
  let next = null;
  let total = 0;
  let wanted = PAGE_SIZE;
  let openId = null;
  let loaded = false;

  const totalEl = h('strong', { testid: 'dlq-total' }, '…');
  const totalLabel = h('span', {}, ' dead letters');
  const replaySelected = readOnly
    ? null
    : button('Replay selected', () => replay([...selected]), { testid: 'replay-selected', disabled: true });
  const toolbar = h(
    'div',
    { class: 'toolbar' },
    h('span', { class: 'toolbar-text' }, totalEl, totalLabel),
    h('span', { class: 'spacer' }),
    readOnly
      ? null
      : [
          replaySelected,
          button('Replay all', () => replay('all'), { testid: 'replay-all' }),
          button('Purge all', purge, { testid: 'purge-all', kind: 'danger' }),
        ],
  );
  const list = h('div', { class: 'dl-list' });
  const more = button('Load more', loadMore, { testid: 'dl-more' });
  more.hidden = true;
  const panel = h('aside', { class: 'panel', testid: 'dl-panel', hidden: true });
  const el = h(
    'div',
    { class: 'page' },
    crumbs(h('a', { href: '#/' }, 'Overview'), h('a', { href: groupHref(group) }, group), 'Dead letters'),
    h('h1', {}, `Dead letters of ${group}`),
    toolbar,
    h('div', { class: 'split' }, h('div', { class: 'split-main' }, list, more), panel),
  );

  function render() {
    totalEl.textContent = num(total);
    totalLabel.textContent = total === 1 ? ' dead letter' : ' dead letters';
    const ids = new Set(items.map((d) => d.id));
    for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
    if (replaySelected) {
      replaySelected.disabled = selected.size === 0;
      replaySelected.textContent = selected.size ? `Replay selected (${selected.size})` : 'Replay selected';
    }
    more.hidden = !next;
    if (openId && !ids.has(openId)) closePanel();
    fill(
      list,
      table({
        columns: columns(),
        rows: items,
        testid: 'dl-table',
        rowTestid: 'dl-row',
        onRow: (d) => open(d.id),
        rowClass: (d) => (d.id === openId ? 'selected' : ''),
        empty: loaded ? 'No dead letters. Events a group gives up on land here.' : 'Loading…',
      }),
    );
    for (const [i, row] of list.querySelectorAll('tbody tr').entries()) row.dataset.id = items[i].id;
  }

  function columns() {
    return [
      readOnly
        ? null
        : {
            label: h('input', {
              type: 'checkbox',
              'aria-label': 'Select all',
              testid: 'dl-select-all',
              checked: items.length > 0 && selected.size === items.length,
              onchange: (e) => toggleAll(e.target.checked),
            }),
            cell: (d) =>
              h('input', {
                type: 'checkbox',
                'aria-label': `Select ${d.id}`,
                testid: 'dl-select',
                checked: selected.has(d.id),
                onchange: (e) => toggle(d.id, e.target.checked),
              }),
            class: 'check',
          },
      { label: 'Event', cell: (d) => d.event ?? h('span', { class: 'muted' }, 'malformed') },
      { label: 'Key', cell: (d) => mono(d.key) },
      { label: 'Error', cell: (d) => errorText(d.error), class: 'grow' },
      { label: 'Attempts', cell: (d) => num(d.attempts), class: 'num' },
      { label: 'Failed', cell: (d) => when(d.failedAt) },
      readOnly
        ? null
        : { label: '', cell: (d) => button('Replay', () => replay([d.id]), { testid: 'replay-one', kind: 'small' }), class: 'actions' },
    ].filter(Boolean);
  }

  function toggle(id, on) {
    if (on) selected.add(id);
    else selected.delete(id);
    render();
  }

  function toggleAll(on) {
    selected.clear();
    if (on) for (const d of items) selected.add(d.id);
    render();
  }

  async function loadMore() {
    const page = await api(`groups/${enc(group)}/dead-letters?count=${PAGE_SIZE}&after=${enc(next)}`);
    items = items.concat(page.items);
    next = page.next;
    total = page.total;
    wanted = Math.min(items.length, MAX_REFRESH_COUNT);
    render();
  }

  async function open(id) {
    openId = id;
    render();
    panel.hidden = false;
    fill(panel, h('p', { class: 'muted' }, 'Loading…'));
    try {
      const letter = await api(`groups/${enc(group)}/dead-letters/${enc(id)}`);
      if (openId === id) fill(panel, ...letterDetails(letter, { onReplay: readOnly ? null : () => replay([id]), onClose: closePanel }));
    } catch (error) {
      if (openId === id) fill(panel, notice(error.status === 404 ? 'This dead letter is gone (replayed or purged).' : error.message));
    }
  }

  function closePanel() {
    openId = null;
    panel.hidden = true;
    fill(panel);
    for (const row of list.querySelectorAll('tr.selected')) row.classList.remove('selected');
  }

  /** Asks, runs a write, reports the result in a toast and refreshes. */
  async function act({ title, message, confirmLabel, run, done }) {
    if (!(await confirmAction(title, message, confirmLabel))) return;
    try {
      toast(done(await run()));
    } catch (error) {
      if (error.status !== 401) toast(`${title} failed: ${error.message}`, 'error');
    }
    await refreshAll();
  }

  function replay(ids) {
    const all = ids === 'all';
    const count = all ? total : ids.length;
    return act({
      title: all ? 'Replay all dead letters' : count === 1 ? 'Replay dead letter' : 'Replay selected dead letters',
      message: `Append ${all ? `all ${num(count)}` : num(count)} dead letter${count === 1 ? '' : 's'} back to the log for group "${group}" (only this group handles ${count === 1 ? 'it' : 'them'} again)?`,
      confirmLabel: 'Replay',
      run: () => api(`groups/${enc(group)}/dead-letters/replay`, { method: 'POST', body: all ? { all: true } : { ids } }),
      done: (result) => `Replayed ${num(result.replayed)}`,
    });
  }

  function purge() {
    return act({
      title: 'Purge all dead letters',
      message: `${total === 1 ? 'Delete the 1 dead letter' : `Delete all ${num(total)} dead letters`} of group "${group}"? They cannot be replayed afterwards.`,
      confirmLabel: 'Purge',
      run: () => api(`groups/${enc(group)}/dead-letters`, { method: 'DELETE' }),
      done: (result) => `Purged ${num(result.purged)}`,
    });
  }

  return {
    el,
    async refresh() {
      let page;
      try {
        page = await api(`groups/${enc(group)}/dead-letters?count=${Math.max(PAGE_SIZE, wanted)}`);
      } catch (error) {
        if (error.status === 404) return fill(list, notice(`There is no consumer group "${group}".`));
        throw error;
      }
      // Another page replaced this one while the request was out.
      if (!el.isConnected) return;
      items = page.items;
      next = page.next;
      total = page.total;
      loaded = true;
      render();
    },
  };
}

/** The panel's content for one dead letter; `onReplay` is null on a read-only dashboard. */
function letterDetails(d, { onReplay, onClose }) {
  return [
    h(
      'header',
      { class: 'panel-header' },
      h('h2', {}, d.event ?? 'Malformed entry'),
      h(
        'div',
        { class: 'panel-actions' },
        onReplay ? button('Replay', onReplay, { testid: 'dl-replay', kind: 'primary' }) : null,
        button('Close', onClose, { kind: 'ghost', testid: 'dl-close' }),
      ),
    ),
    h(
      'dl',
      { class: 'fields' },
      field('Dead letter id', mono(d.id)),
      field('Event id', mono(d.eventId)),
      field('Key', mono(d.key)),
      field('Origin', h('a', { href: eventHref(d.partition, d.offset), class: 'mono' }, `P${d.partition} @ ${d.offset}`)),
      field('Reason', d.reason),
      field('Attempts', num(d.attempts)),
      field('First failed', dateTime(d.firstFailedAt)),
      field('Failed', dateTime(d.failedAt)),
      field('Worker', mono(d.worker)),
    ),
    h('h3', {}, 'Error'),
    h('p', { class: 'error-message', testid: 'dl-error' }, `${d.error.name}: ${d.error.message}`),
    d.error.stack ? h('pre', { class: 'code code-small', testid: 'dl-stack' }, d.error.stack) : null,
    h('h3', {}, 'Payload'),
    h('pre', { class: 'code', testid: 'dl-payload' }, json(d.data)),
    h('h3', {}, 'Headers'),
    h('pre', { class: 'code code-small', testid: 'dl-headers' }, json(d.headers ?? {})),
  ];
}
