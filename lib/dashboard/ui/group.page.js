// One consumer group: its partitions (offsets, lag, leases), parked keys, live members and newest dead letters.
/* global location -- browser global: this file runs in the page, not in Node */

import { api } from './api.js';
import { fill, h } from './dom.js';
import { duration, num } from './format.js';
import { lagChart } from './history.js';
import { parkedPanel } from './parked.panel.js';
import { deadLettersHref, enc } from './routes.js';
import { crumbs, errorText, eventChips, groupHealth, metric, mono, notice, table, when } from './widgets.js';

/** `readOnly` hides the parked keys' write controls; `refreshAll` refetches the overview and this page after a write. */
export function groupPage(name, { readOnly, refreshAll }) {
  const body = h('div', { class: 'stack' }, h('p', { class: 'muted' }, 'Loading…'));
  const el = h('div', { class: 'page' }, crumbs(h('a', { href: '#/' }, 'Overview'), name), h('h1', {}, name), body);
  return {
    el,
    async refresh() {
      let group;
      let parked;
      try {
        [group, parked] = await Promise.all([api(`groups/${enc(name)}`), api(`groups/${enc(name)}/parked`)]);
      } catch (error) {
        if (error.status === 404) return fill(body, notice(`There is no consumer group "${name}".`));
        throw error;
      }
      // Another page replaced this one while the request was out.
      if (!el.isConnected) return;
      fill(
        body,
        summary(group),
        h('h2', {}, 'Partitions'),
        partitionsTable(group),
        parkedPanel(name, parked, { readOnly, refreshAll }),
        h('h2', {}, 'Members'),
        membersTable(group),
        h('h2', {}, 'Recent errors ', h('a', { class: 'small', href: deadLettersHref(group.name) }, 'all dead letters →')),
        recentErrorsTable(group),
      );
    },
  };
}

function summary(group) {
  return h(
    'section',
    { class: 'card' },
    eventChips(group),
    h(
      'div',
      { class: 'metrics' },
      groupHealth(group),
      metric('Members', num(group.members.length)),
      metric('Last seen', when(group.lastSeen)),
    ),
    lagChart(group.name, { width: 1000, height: 180 }),
  );
}

function partitionsTable(group) {
  return table({
    columns: [
      { label: 'Partition', cell: (p) => h('a', { href: `#/log?partition=${p.partition}` }, `P${p.partition}`) },
      {
        label: 'Committed offset',
        cell: (p) =>
          p.committed
            ? h('a', { href: `#/log?partition=${p.partition}&from=${enc(p.committed)}`, class: 'mono' }, p.committed)
            : h('span', { class: 'muted' }, 'not read yet'),
      },
      { label: 'Lag', cell: (p) => `${num(p.lag)}${p.lagCapped ? '+' : ''}`, class: 'num' },
      { label: 'Lease owner', cell: (p) => (p.leaseOwner ? mono(p.leaseOwner) : h('span', { class: 'muted' }, 'none')) },
      { label: 'Lease expires in', cell: (p) => duration(p.leaseExpiresInMs), class: 'num' },
    ],
    rows: group.partitions,
    testid: 'partitions-table',
    rowTestid: 'partition-row',
  });
}

function membersTable(group) {
  return table({
    columns: [
      { label: 'Worker', cell: (m) => mono(m.workerId) },
      { label: 'Host', cell: (m) => m.host ?? '—' },
      { label: 'PID', cell: (m) => num(m.pid), class: 'num' },
      { label: 'Started', cell: (m) => when(m.startedAt) },
      { label: 'Last heartbeat', cell: (m) => when(m.lastHeartbeat) },
    ],
    rows: group.members,
    testid: 'members-table',
    rowTestid: 'member-row',
    empty: 'No live members: nobody consumes this group right now.',
  });
}

function recentErrorsTable(group) {
  return table({
    columns: [
      { label: 'Event', cell: (d) => d.event ?? h('span', { class: 'muted' }, 'malformed') },
      { label: 'Error', cell: (d) => errorText(d.error), class: 'grow' },
      { label: 'Failed', cell: (d) => when(d.failedAt) },
      { label: 'Attempts', cell: (d) => num(d.attempts), class: 'num' },
    ],
    rows: group.recentErrors ?? [],
    testid: 'recent-errors',
    rowTestid: 'error-row',
    onRow: () => (location.hash = deadLettersHref(group.name)),
    empty: 'No dead letters.',
  });
}
