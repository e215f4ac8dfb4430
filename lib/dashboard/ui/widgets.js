// The small pieces the pages are made of: tables, metrics, chips, buttons, breadcrumbs.

import { h } from './dom.js';
import { ago, dateTime, lagText, num } from './format.js';
import { deadLettersHref } from './routes.js';

export function table({ columns, rows, testid, rowTestid, onRow, rowClass, empty = 'Nothing here.' }) {
  if (rows.length === 0) return h('p', { class: 'muted empty', testid: testid ? `${testid}-empty` : undefined }, empty);
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      { class: 'table', testid },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          columns.map((c) => h('th', { class: c.class }, c.label)),
        ),
      ),
      h(
        'tbody',
        {},
        rows.map((row) => {
          const tr = h(
            'tr',
            { testid: rowTestid, class: [onRow ? 'clickable' : '', rowClass ? rowClass(row) : ''].join(' ').trim() || undefined },
            columns.map((c) => h('td', { class: c.class }, c.cell(row))),
          );
          if (onRow)
            tr.addEventListener('click', (event) => {
              if (!event.target.closest('input, button, a')) onRow(row);
            });
          return tr;
        }),
      ),
    ),
  );
}

export function metric(label, value, { testid, className, hint } = {}) {
  return h(
    'div',
    { class: `metric ${className ?? ''}`.trim() },
    h('div', { class: 'metric-label' }, label),
    h('div', { class: 'metric-value', testid }, value),
    hint ? h('div', { class: 'metric-hint' }, hint) : null,
  );
}

/** The event types a group handles; a group whose workers are all gone lists none. */
export function eventChips(group) {
  return group.events.length
    ? chips(group.events)
    : h('div', { class: 'chips' }, h('span', { class: 'chip chip-muted' }, 'no live handlers'));
}

function chips(items) {
  return h(
    'div',
    { class: 'chips' },
    items.map((item) => h('span', { class: 'chip' }, item)),
  );
}

export function mono(text, title) {
  return h('span', { class: 'mono', title: title ?? text ?? undefined }, text ?? '—');
}

export function notice(message, kind = 'error') {
  return h('p', { class: `notice notice-${kind}`, testid: 'notice' }, message);
}

export function button(label, onclick, { testid, kind = '', disabled = false } = {}) {
  return h('button', { type: 'button', class: `button ${kind ? `button-${kind}` : ''}`.trim(), testid, onclick, disabled }, label);
}

export function crumbs(...parts) {
  return h(
    'nav',
    { class: 'crumbs' },
    parts.map((part, i) => [i > 0 ? h('span', { class: 'crumb-sep' }, '/') : null, typeof part === 'string' ? h('span', {}, part) : part]),
  );
}

/** A `<dt>`/`<dd>` pair for a `<dl class="fields">`. */
export function field(label, value) {
  return [h('dt', {}, label), h('dd', {}, value)];
}

/** A time cell: relative, with the exact time on hover. */
export function when(iso) {
  return h('time', { datetime: iso ?? undefined, title: iso ? dateTime(iso) : undefined }, ago(iso));
}

export function errorText(error) {
  return h('span', { class: 'error-text', title: `${error.name}: ${error.message}` }, h('strong', {}, error.name), `: ${error.message}`);
}

/** A group's lag and dead letters: the metrics its overview card and its page both start with. */
export function groupHealth(group) {
  return [
    metric('Lag', lagText(group), { testid: 'group-lag', className: group.lag > 0 ? 'warn' : '' }),
    metric('Dead letters', h('a', { href: deadLettersHref(group.name), testid: 'dlq-count' }, num(group.deadLetters)), {
      className: group.deadLetters > 0 ? 'bad' : '',
    }),
  ];
}
