// One log entry as stored: its data, headers and, for a malformed entry, the raw fields.

import { api } from './api.js';
import { fill, h } from './dom.js';
import { dateTime, json } from './format.js';
import { enc, groupHref } from './routes.js';
import { crumbs, field, mono, notice } from './widgets.js';

export function eventPage(partition, offset) {
  const body = h('div', {}, h('p', { class: 'muted' }, 'Loading…'));
  const el = h(
    'div',
    { class: 'page' },
    crumbs(
      h('a', { href: '#/' }, 'Overview'),
      h('a', { href: `#/log?partition=${enc(partition)}&from=${enc(offset)}` }, `Log P${partition}`),
      offset,
    ),
    body,
  );
  let loaded = false;
  return {
    el,
    async refresh() {
      if (loaded) return; // an appended entry never changes
      let entry;
      try {
        entry = await api(`log/${enc(partition)}/${enc(offset)}`);
      } catch (error) {
        if (error.status === 404 || error.status === 400)
          return fill(
            body,
            notice(error.status === 404 ? `No entry ${offset} in partition ${partition} (trimmed, or never there).` : error.message),
          );
        throw error;
      }
      // Another page replaced this one while the request was out.
      if (!el.isConnected) return;
      loaded = true;
      fill(body, ...entryDetails(entry));
    },
  };
}

function entryDetails(entry) {
  return [
    h('h1', { testid: 'event-title' }, entry.event ?? 'Malformed entry'),
    entry.malformed ? notice(`Malformed: ${entry.malformed}. Consumers dead-letter it without handling it.`, 'warn') : null,
    h(
      'section',
      { class: 'card' },
      h(
        'dl',
        { class: 'fields' },
        field('Event id', mono(entry.id)),
        field('Key', mono(entry.key)),
        field('Partition', `P${entry.partition}`),
        field('Offset', mono(entry.offset)),
        field('Published', dateTime(entry.publishedAt)),
        entry.to ? field('Only for group', h('a', { href: groupHref(entry.to) }, entry.to)) : null,
      ),
    ),
    h('h2', {}, 'Data'),
    h('pre', { class: 'code', testid: 'event-data' }, json(entry.data)),
    h('h2', {}, 'Headers'),
    h('pre', { class: 'code code-small', testid: 'event-headers' }, json(entry.headers ?? {})),
    entry.fields
      ? [h('h2', {}, 'Fields as stored'), h('pre', { class: 'code code-small', testid: 'event-fields' }, json(entry.fields))]
      : null,
  ];
}
