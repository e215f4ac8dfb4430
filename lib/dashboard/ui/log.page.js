// The log, one partition at a time: from an offset or a time, filtered by event type, newest entries added as they come.
/* global location, URLSearchParams -- browser globals: this file runs in the page, not in Node */

import { api, PAGE_SIZE } from './api.js';
import { fill, h } from './dom.js';
import { dateTime } from './format.js';
import { eventHref } from './routes.js';
import { button, crumbs, mono, notice, table } from './widgets.js';

const STREAM_ID = /^\d+(-\d+)?$/;

export function logPage(params) {
  const partition = params.get('partition') ?? '0';
  const from = params.get('from') ?? '';
  const eventFilter = params.get('event') ?? '';
  let entries = [];
  let next = null;
  /** Where the server's scan stopped: new entries are looked for after it. */
  let scannedTo = null;
  let loaded = false;

  const select = h('select', { name: 'partition', testid: 'log-partition', 'aria-label': 'Partition' });
  const fromInput = h('input', {
    name: 'from',
    value: from,
    placeholder: '1700000000000-0 or 2025-01-31 12:00',
    testid: 'log-from',
    'aria-label': 'From',
  });
  const eventInput = h('input', {
    name: 'event',
    value: eventFilter,
    placeholder: 'order.placed, order.paid',
    testid: 'log-event',
    'aria-label': 'Event types',
  });
  const formError = h('span', { class: 'form-error', testid: 'log-form-error' });
  const form = h(
    'form',
    { class: 'filters', testid: 'log-form', onsubmit: submit },
    h('label', {}, 'Partition', select),
    h('label', { class: 'grow' }, 'From (id or time)', fromInput),
    h('label', { class: 'grow' }, 'Event types', eventInput),
    h('button', { type: 'submit', class: 'button button-primary', testid: 'log-apply' }, 'Show'),
    formError,
  );
  const list = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const more = button('Load more', loadMore, { testid: 'log-more' });
  more.hidden = true;
  const el = h(
    'div',
    { class: 'page' },
    crumbs(h('a', { href: '#/' }, 'Overview'), 'Log'),
    h('h1', {}, `Log · partition ${partition}`),
    form,
    list,
    more,
  );

  function fillPartitions(count) {
    if (select.options.length === count && count > 0) return;
    // The partition in the URL is shown even when out of range (the API says so), but never builds a huge list.
    const asked = Number(partition);
    const n = Number.isInteger(asked) && asked >= count && asked < count + 1000 ? asked + 1 : count;
    fill(select, ...Array.from({ length: n }, (_, p) => h('option', { value: String(p) }, `P${p}`)));
    select.value = partition;
  }

  /** Turns the form into a new `#/log?...` route; a time in "from" is sent as an ISO date. */
  function submit(event) {
    event.preventDefault();
    const query = new URLSearchParams({ partition: select.value });
    const fromValue = fromInput.value.trim();
    if (fromValue) {
      if (STREAM_ID.test(fromValue)) query.set('from', fromValue);
      else {
        const time = new Date(fromValue);
        if (Number.isNaN(time.getTime())) {
          formError.textContent = 'Enter a stream id (1700000000000-0) or a date and time.';
          return;
        }
        query.set('from', time.toISOString());
      }
    }
    const events = eventInput.value
      .split(',')
      .map((e) => e.trim())
      .filter(Boolean)
      .join(',');
    if (events) query.set('event', events);
    formError.textContent = '';
    location.hash = `#/log?${query}`;
  }

  function query(extra) {
    const q = new URLSearchParams({ partition, count: String(PAGE_SIZE), ...extra });
    if (from && !extra.after) q.set('from', from);
    if (eventFilter) q.set('event', eventFilter);
    return `log?${q}`;
  }

  function render() {
    more.hidden = !next;
    fill(
      list,
      table({
        columns: [
          { label: 'Offset', cell: (e) => h('a', { href: eventHref(e.partition, e.offset), class: 'mono' }, e.offset) },
          { label: 'Published', cell: (e) => h('time', { title: e.publishedAt ?? undefined }, dateTime(e.publishedAt)) },
          {
            label: 'Event',
            cell: (e) =>
              e.malformed
                ? h('span', { class: 'badge badge-bad', title: e.malformed }, 'malformed')
                : [e.event, e.to ? h('span', { class: 'muted small', title: `Replayed for group ${e.to} only` }, ` → ${e.to}`) : null],
          },
          { label: 'Key', cell: (e) => mono(e.key) },
          { label: 'Event id', cell: (e) => mono(e.id), class: 'grow' },
        ],
        rows: entries,
        testid: 'log-table',
        rowTestid: 'log-row',
        onRow: (e) => (location.hash = eventHref(e.partition, e.offset)),
        empty: loaded ? 'No entries match.' : 'Loading…',
      }),
    );
  }

  async function loadMore() {
    const page = await api(query({ after: next }));
    entries = entries.concat(page.entries);
    next = page.next;
    scannedTo = page.scannedTo ?? scannedTo;
    render();
  }

  return {
    el,
    async refresh(overview) {
      fillPartitions(overview.partitions);
      let page;
      try {
        // Entries never change once appended: after the first page, only look for new ones at the end.
        // Polls go on from the last entry the server looked at, so a rare event type is not scanned for again and again.
        if (!loaded || (next === null && scannedTo === null)) page = await api(query({}));
        else if (next === null) page = await api(query({ after: scannedTo }));
        else return;
      } catch (error) {
        if (error.status === 400) return fill(list, notice(error.message));
        throw error;
      }
      // Another page replaced this one while the request was out.
      if (!el.isConnected) return;
      if (!loaded) {
        entries = page.entries;
        loaded = true;
      } else entries = entries.concat(page.entries.filter((e) => !entries.some((x) => x.offset === e.offset)));
      next = page.next;
      scannedTo = page.scannedTo ?? scannedTo;
      render();
    },
  };
}
