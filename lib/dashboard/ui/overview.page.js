// The overview: Redis, the log and its throughput, and a card per consumer group with its lag over time.

import { fill, h } from './dom.js';
import { humanBytes, millis, num } from './format.js';
import { lagChart, latestThroughput, throughputChart } from './history.js';
import { groupHref } from './routes.js';
import { eventChips, groupHealth, metric, mono, table, when } from './widgets.js';

export function overviewPage() {
  const stats = h('section', { class: 'stats' });
  const groups = h('section', { class: 'groups', testid: 'groups' });
  const el = h('div', { class: 'page' }, h('h1', {}, 'Overview'), stats, h('h2', {}, 'Consumer groups'), groups);
  return {
    el,
    refresh(overview) {
      fill(stats, redisCard(overview), logCard(overview), throughputCard(overview));
      fill(
        groups,
        ...(overview.groups.length
          ? overview.groups.map(groupCard)
          : [h('p', { class: 'muted' }, 'No consumer groups yet: they appear once a worker with @OnEvent handlers starts.')]),
      );
    },
  };
}

function redisCard({ redis, nodes }) {
  return h(
    'article',
    { class: 'card' },
    h('h3', {}, 'Redis'),
    h(
      'div',
      { class: 'metrics' },
      metric('Status', h('span', {}, h('span', { class: `dot ${redis.status === 'ready' ? 'dot-ok' : 'dot-bad'}` }), redis.status), {
        testid: 'redis-status',
      }),
      metric('Ping', redis.pingMs == null ? '—' : millis(redis.pingMs), { testid: 'redis-ping' }),
      metric('Memory', humanBytes(redis.usedMemoryBytes), { testid: 'redis-memory' }),
    ),
    h(
      'ul',
      { class: 'nodes', testid: 'nodes' },
      nodes.map((n) =>
        h(
          'li',
          {},
          mono(n.node),
          ` · partitions ${n.partitions.join(', ') || '—'}`,
          n.replicas.length ? ` · replicas ${n.replicas.join(', ')}` : '',
        ),
      ),
    ),
  );
}

function logCard({ log, partitions }) {
  return h(
    'article',
    { class: 'card' },
    h('h3', {}, 'Log'),
    h(
      'div',
      { class: 'metrics' },
      metric('Entries', num(log.length), { testid: 'log-length' }),
      metric('Partitions', num(partitions)),
      metric('Appended ever', num(log.entriesAdded)),
    ),
    h(
      'div',
      { class: 'partition-bars' },
      log.partitions.map((p) =>
        h(
          'a',
          { class: 'partition-link', href: `#/log?partition=${p.partition}`, title: `Browse partition ${p.partition}` },
          `P${p.partition}`,
          h('span', { class: 'muted' }, ` ${num(p.length)}`),
        ),
      ),
    ),
  );
}

function throughputCard({ log }) {
  const rate = latestThroughput();
  return h(
    'article',
    { class: 'card' },
    h('h3', {}, 'Throughput'),
    h(
      'div',
      { class: 'metrics' },
      metric('Appended', log.entriesAdded == null ? 'n/a' : rate === undefined ? '…' : `${rate.toFixed(1)} /s`, {
        testid: 'throughput',
        hint: log.entriesAdded == null ? 'needs Redis 7' : 'events per second',
      }),
    ),
    throughputChart(),
  );
}

function groupCard(group) {
  const members = group.members.length;
  return h(
    'article',
    { class: 'card group-card', testid: 'group-card', dataset: { group: group.name } },
    h(
      'header',
      { class: 'card-header' },
      h('h3', {}, h('a', { href: groupHref(group.name), testid: 'group-link' }, group.name)),
      h(
        'span',
        { class: `badge ${members ? 'badge-ok' : 'badge-warn'}`, testid: 'members-count' },
        members === 0 ? 'no members' : members === 1 ? '1 member' : `${members} members`,
      ),
    ),
    eventChips(group),
    h('div', { class: 'metrics' }, groupHealth(group), metric('Last seen', when(group.lastSeen))),
    lagChart(group.name),
    table({
      columns: [
        { label: 'Partition', cell: (p) => `P${p.partition}` },
        { label: 'Lease owner', cell: (p) => (p.leaseOwner ? mono(p.leaseOwner) : h('span', { class: 'muted' }, 'none')), class: 'grow' },
        { label: 'Lag', cell: (p) => `${num(p.lag)}${p.lagCapped ? '+' : ''}`, class: 'num' },
      ],
      rows: group.partitions,
      testid: 'lease-table',
    }),
  );
}
