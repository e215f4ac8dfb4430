// Event payloads, names and errors are untrusted: the page is built with createElement/textContent only, never innerHTML, so no value can become markup.
/* global document, window, location, sessionStorage, fetch, URLSearchParams, Node, setTimeout, clearTimeout -- browser globals: this file runs in the page, not in Node */

const TOKEN_KEY = 'eventrail.dashboard.token';
/** How much lag and throughput history the browser keeps (in memory only). */
const HISTORY_MS = 5 * 60_000;
const PAGE_SIZE = 50;
/** Largest page re-fetched on refresh, so loaded rows stay in place. */
const MAX_REFRESH_COUNT = 500;
const SVG_NS = 'http://www.w3.org/2000/svg';

const view = document.getElementById('view');

const state = {
  config: { authRequired: false, readOnly: true, refreshMs: 5000 },
  token: sessionStorage.getItem(TOKEN_KEY),
  /** The latest `api/overview`. */
  overview: null,
  /** group name -> [{ t, lags: number[] }] */
  lagHistory: new Map(),
  /** [{ t, rate }] in events per second */
  throughput: [],
  lastAdded: null,
  /** The current page: { el, refresh(overview) }. */
  page: null,
  timer: 0,
  inFlight: false,
  pending: false,
  started: false,
};

// ---------------------------------------------------------------- DOM helpers

function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : String(child));
  }
  return parent;
}

/**
 * `#/...` links made absolute to this document. `<base href>` ends with a slash, so a bare `#/x`
 * would resolve to `<path>/#/x`: another URL than `<path>#/x`, and a full reload that loses the charts' history.
 */
function inPage(href) {
  return href.startsWith('#') ? `${location.pathname}${location.search}${href}` : href;
}

/** `h('a', { href, class, testid, onclick }, ...children)`: strings become text nodes. */
function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') el.className = value;
    else if (name === 'testid') el.dataset.testid = value;
    else if (name === 'dataset') Object.assign(el.dataset, value);
    else if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (name === 'href') el.setAttribute('href', inPage(String(value)));
    else if (typeof value === 'boolean') el[name] = value;
    else el.setAttribute(name, String(value));
  }
  return append(el, children);
}

/** Replaces `parent`'s children; like `h`, it skips null and false and flattens arrays (replaceChildren would print "null"). */
function fill(parent, ...children) {
  parent.replaceChildren();
  return append(parent, children);
}

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  return append(el, children);
}

const enc = encodeURIComponent;

// ---------------------------------------------------------------- formatting

function num(n) {
  return n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US');
}

function humanBytes(bytes) {
  if (bytes === null || bytes === undefined) return 'n/a';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

function millis(ms) {
  return `${ms < 1 ? ms.toFixed(2) : ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms`;
}

function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  const s = Math.abs(ms) / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

function ago(iso) {
  if (!iso) return '—';
  const ms = Date.now() - Date.parse(iso);
  return ms < 0 ? `in ${duration(-ms)}` : `${duration(ms)} ago`;
}

function dateTime(iso) {
  return iso ? new Date(iso).toLocaleString() : '—';
}

/** A time cell: relative, with the exact time on hover. */
function when(iso) {
  return h('time', { datetime: iso ?? undefined, title: iso ? dateTime(iso) : undefined }, ago(iso));
}

function lagText(group) {
  return `${num(group.lag)}${group.partitions.some((p) => p.lagCapped) ? '+' : ''}`;
}

function json(value) {
  if (typeof value === 'string') return value;
  return JSON.stringify(value, null, 2) ?? String(value);
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function messageOf(body, fallback) {
  const message = body && typeof body === 'object' ? body.message : null;
  if (Array.isArray(message)) return message.join('; ');
  return typeof message === 'string' && message ? message : fallback;
}

async function api(path, { method = 'GET', body } = {}) {
  const headers = { Accept: 'application/json' };
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(`api/${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch (error) {
    throw new ApiError(0, `The dashboard server cannot be reached (${error.message})`);
  }
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON (a proxy's error page): the status line says enough.
  }
  if (response.status === 401 && state.config.authRequired) {
    signOut('The token was refused. Enter it again.');
    throw new ApiError(401, 'Unauthorized');
  }
  if (!response.ok) throw new ApiError(response.status, messageOf(parsed, `${response.status} ${response.statusText}`));
  return parsed;
}

// ---------------------------------------------------------------- chrome: header, toasts, confirmation

function updateHeader() {
  const overview = state.overview;
  document.getElementById('read-only').hidden = !state.config.readOnly;
  document.getElementById('sign-out').hidden = !(state.config.authRequired && state.token);
  document.getElementById('nav').hidden = !state.started;
  document.getElementById('prefix').textContent = overview ? overview.prefix : '';
  const connection = document.getElementById('connection');
  if (!overview) {
    fill(connection);
    return;
  }
  const up = overview.redis.status === 'ready';
  fill(
    connection,
    h('span', { class: `dot ${up ? 'dot-ok' : 'dot-bad'}` }),
    `Redis ${overview.redis.status}${overview.redis.pingMs == null ? '' : ` · ${millis(overview.redis.pingMs)}`}`,
  );
  for (const link of document.querySelectorAll('#nav a')) {
    if (link.dataset.nav === currentNav()) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

function setUpdated(error) {
  const el = document.getElementById('updated');
  el.classList.toggle('error', Boolean(error));
  el.textContent = error ? `Update failed: ${error.message}` : `Updated ${new Date().toLocaleTimeString()}`;
}

function toast(message, kind = 'ok') {
  const el = h('div', { class: `toast toast-${kind}`, testid: 'toast' }, message);
  document.getElementById('toasts').append(el);
  setTimeout(() => el.remove(), kind === 'error' ? 8000 : 4000);
}

/** A modal confirmation; resolves true when confirmed. */
function confirmAction(title, message, confirmLabel = 'Confirm') {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-message').textContent = message;
  document.getElementById('confirm-ok').textContent = confirmLabel;
  dialog.returnValue = '';
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.showModal();
  });
}

/** Asks, runs a write, reports the result in a toast and refreshes. */
async function act({ title, message, confirmLabel, run, done }) {
  if (!(await confirmAction(title, message, confirmLabel))) return;
  try {
    toast(done(await run()));
  } catch (error) {
    if (error.status !== 401) toast(`${title} failed: ${error.message}`, 'error');
  }
  await refresh();
}

// ---------------------------------------------------------------- charts

function niceCeil(value) {
  if (value <= 1) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * magnitude >= value) return step * magnitude;
  return 10 * magnitude;
}

/**
 * A line chart of `series` ([{ label, points: [{ t, v }] }]) over time, one
 * polyline each; colors come from the `s0`..`s7` classes in style.css.
 */
function lineChart({ series, testid, label, format = num, legend = true, width = 480, height = 150 }) {
  const pad = { left: 44, right: 10, top: 10, bottom: 22 };
  const points = series.flatMap((s) => s.points);
  const wrap = h('figure', { class: 'chart', testid });
  const chart = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': label, class: 'chart-svg' });
  wrap.append(chart);
  if (points.length === 0) {
    chart.append(svg('text', { x: width / 2, y: height / 2, class: 'chart-empty', 'text-anchor': 'middle' }, 'Collecting samples…'));
    return wrap;
  }
  const tMax = Math.max(...points.map((p) => p.t));
  // The window grows with the samples kept, up to HISTORY_MS.
  const tMin = Math.min(Math.min(...points.map((p) => p.t)), tMax - 1000);
  const yMax = niceCeil(Math.max(...points.map((p) => p.v)));
  const x = (t) => pad.left + ((t - tMin) / (tMax - tMin)) * (width - pad.left - pad.right);
  const y = (v) => height - pad.bottom - (v / yMax) * (height - pad.top - pad.bottom);

  for (const v of [0, yMax / 2, yMax]) {
    chart.append(
      svg('line', { x1: pad.left, x2: width - pad.right, y1: y(v), y2: y(v), class: 'chart-grid' }),
      svg('text', { x: pad.left - 6, y: y(v) + 4, class: 'chart-label', 'text-anchor': 'end' }, format(v)),
    );
  }
  chart.append(
    svg('text', { x: pad.left, y: height - 6, class: 'chart-label' }, `${duration(tMax - tMin)} ago`),
    svg('text', { x: width - pad.right, y: height - 6, class: 'chart-label', 'text-anchor': 'end' }, 'now'),
  );
  series.forEach((s, i) => {
    const color = `s${i % 8}`;
    if (s.points.length > 1) {
      const coords = s.points.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ');
      chart.append(svg('polyline', { points: coords, class: `chart-line ${color}` }, svg('title', {}, s.label)));
    }
    const last = s.points[s.points.length - 1];
    if (last) chart.append(svg('circle', { cx: x(last.t), cy: y(last.v), r: 2.5, class: `chart-dot ${color}` }));
  });
  if (legend) {
    wrap.append(
      h(
        'figcaption',
        { class: 'legend' },
        series.map((s, i) => h('span', { class: 'legend-item' }, h('span', { class: `swatch s${i % 8}` }), s.label)),
      ),
    );
  }
  return wrap;
}

function lagChart(groupName, size = { width: 480, height: 120 }) {
  const samples = state.lagHistory.get(groupName) ?? [];
  const partitions = Math.max(0, ...samples.map((s) => s.lags.length));
  const series = Array.from({ length: partitions }, (_, p) => ({
    label: `P${p}`,
    points: samples.filter((s) => p < s.lags.length).map((s) => ({ t: s.t, v: s.lags[p] })),
  }));
  return lineChart({ series, testid: 'lag-chart', label: `Lag per partition of ${groupName}`, ...size });
}

/** Keeps the last few minutes of lag per group and log throughput, from each overview. */
function recordSamples(overview) {
  const t = Date.parse(overview.time) || Date.now();
  const since = t - HISTORY_MS;
  const names = new Set();
  for (const group of overview.groups) {
    names.add(group.name);
    const samples = (state.lagHistory.get(group.name) ?? []).filter((s) => s.t >= since && s.t < t);
    samples.push({ t, lags: group.partitions.map((p) => p.lag) });
    state.lagHistory.set(group.name, samples);
  }
  for (const name of [...state.lagHistory.keys()]) if (!names.has(name)) state.lagHistory.delete(name);

  const total = overview.log.entriesAdded;
  if (total === null || total === undefined) return;
  const last = state.lastAdded;
  if (last && t > last.t && total >= last.total) {
    state.throughput = state.throughput.filter((s) => s.t >= since);
    state.throughput.push({ t, rate: (total - last.total) / ((t - last.t) / 1000) });
  }
  state.lastAdded = { t, total };
}

// ---------------------------------------------------------------- small building blocks

function table({ columns, rows, testid, rowTestid, onRow, rowClass, empty = 'Nothing here.' }) {
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

function metric(label, value, { testid, className, hint } = {}) {
  return h(
    'div',
    { class: `metric ${className ?? ''}`.trim() },
    h('div', { class: 'metric-label' }, label),
    h('div', { class: 'metric-value', testid }, value),
    hint ? h('div', { class: 'metric-hint' }, hint) : null,
  );
}

/** The event types a group handles; a group whose workers are all gone lists none. */
function eventChips(group) {
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

function mono(text, title) {
  return h('span', { class: 'mono', title: title ?? text ?? undefined }, text ?? '—');
}

function notice(message, kind = 'error') {
  return h('p', { class: `notice notice-${kind}`, testid: 'notice' }, message);
}

function button(label, onclick, { testid, kind = '', disabled = false } = {}) {
  return h('button', { type: 'button', class: `button ${kind ? `button-${kind}` : ''}`.trim(), testid, onclick, disabled }, label);
}

function crumbs(...parts) {
  return h(
    'nav',
    { class: 'crumbs' },
    parts.map((part, i) => [i > 0 ? h('span', { class: 'crumb-sep' }, '/') : null, typeof part === 'string' ? h('span', {}, part) : part]),
  );
}

const groupHref = (name) => `#/groups/${enc(name)}`;
const deadLettersHref = (name) => `#/groups/${enc(name)}/dead-letters`;
const eventHref = (partition, offset) => `#/log/${enc(partition)}/${enc(offset)}`;

// ---------------------------------------------------------------- overview

function overviewPage() {
  const stats = h('section', { class: 'stats' });
  const groups = h('section', { class: 'groups', testid: 'groups' });
  const el = h('div', { class: 'page' }, h('h1', {}, 'Overview'), stats, h('h2', {}, 'Consumer groups'), groups);
  return {
    el,
    refresh(overview) {
      fill(stats, ...statCards(overview));
      fill(
        groups,
        ...(overview.groups.length
          ? overview.groups.map(groupCard)
          : [h('p', { class: 'muted' }, 'No consumer groups yet: they appear once a worker with @OnEvent handlers starts.')]),
      );
    },
  };
}

function statCards(overview) {
  const { redis, log, nodes } = overview;
  const latest = state.throughput[state.throughput.length - 1];
  return [
    h(
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
    ),
    h(
      'article',
      { class: 'card' },
      h('h3', {}, 'Log'),
      h(
        'div',
        { class: 'metrics' },
        metric('Entries', num(log.length), { testid: 'log-length' }),
        metric('Partitions', num(overview.partitions)),
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
    ),
    h(
      'article',
      { class: 'card' },
      h('h3', {}, 'Throughput'),
      h(
        'div',
        { class: 'metrics' },
        metric('Appended', log.entriesAdded == null ? 'n/a' : latest ? `${latest.rate.toFixed(1)} /s` : '…', {
          testid: 'throughput',
          hint: log.entriesAdded == null ? 'needs Redis 7' : 'events per second',
        }),
      ),
      lineChart({
        series: [{ label: 'events/s', points: state.throughput.map((s) => ({ t: s.t, v: s.rate })) }],
        testid: 'throughput-chart',
        label: 'Events appended per second',
        format: (v) => (v >= 10 ? num(Math.round(v)) : Number(v.toFixed(1)).toString()),
        legend: false,
      }),
    ),
  ];
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
    h(
      'div',
      { class: 'metrics' },
      metric('Lag', lagText(group), { testid: 'group-lag', className: group.lag > 0 ? 'warn' : '' }),
      metric('Dead letters', h('a', { href: deadLettersHref(group.name), testid: 'dlq-count' }, num(group.deadLetters)), {
        className: group.deadLetters > 0 ? 'bad' : '',
      }),
      metric('Last seen', when(group.lastSeen)),
    ),
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

// ---------------------------------------------------------------- group page

function groupPage(name) {
  const body = h('div', { class: 'stack' }, h('p', { class: 'muted' }, 'Loading…'));
  const el = h('div', { class: 'page' }, crumbs(h('a', { href: '#/' }, 'Overview'), name), h('h1', {}, name), body);
  return {
    el,
    async refresh() {
      let group;
      try {
        group = await api(`groups/${enc(name)}`);
      } catch (error) {
        if (error.status === 404) return fill(body, notice(`There is no consumer group "${name}".`));
        throw error;
      }
      if (state.page?.el !== el) return;
      fill(body, ...groupSections(group));
    },
  };
}

function groupSections(group) {
  return [
    h(
      'section',
      { class: 'card' },
      eventChips(group),
      h(
        'div',
        { class: 'metrics' },
        metric('Lag', lagText(group), { testid: 'group-lag', className: group.lag > 0 ? 'warn' : '' }),
        metric('Dead letters', h('a', { href: deadLettersHref(group.name), testid: 'dlq-count' }, num(group.deadLetters)), {
          className: group.deadLetters > 0 ? 'bad' : '',
        }),
        metric('Members', num(group.members.length)),
        metric('Last seen', when(group.lastSeen)),
      ),
      lagChart(group.name, { width: 1000, height: 180 }),
    ),
    h('h2', {}, 'Partitions'),
    table({
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
    }),
    h('h2', {}, 'Members'),
    table({
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
    }),
    h('h2', {}, 'Recent errors ', h('a', { class: 'small', href: deadLettersHref(group.name) }, 'all dead letters →')),
    table({
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
    }),
  ];
}

function errorText(error) {
  return h('span', { class: 'error-text', title: `${error.name}: ${error.message}` }, h('strong', {}, error.name), `: ${error.message}`);
}

// ---------------------------------------------------------------- dead letters

function deadLettersPage(group) {
  const readOnly = state.config.readOnly;
  const selected = new Set();
  let items = [];
  let next = null;
  let total = 0;
  let wanted = PAGE_SIZE;
  let openId = null;
  let loaded = false;

  const totalEl = h('strong', { testid: 'dlq-total' }, '…');
  const replaySelected = readOnly
    ? null
    : button('Replay selected', () => replay([...selected]), { testid: 'replay-selected', disabled: true });
  const toolbar = h(
    'div',
    { class: 'toolbar' },
    h('span', { class: 'toolbar-text' }, totalEl, ' dead letters'),
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
    const ids = new Set(items.map((d) => d.id));
    for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
    if (replaySelected) {
      replaySelected.disabled = selected.size === 0;
      replaySelected.textContent = selected.size ? `Replay selected (${selected.size})` : 'Replay selected';
    }
    more.hidden = !next;
    if (openId && !ids.has(openId)) closePanel();
    const columns = [
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
    fill(
      list,
      table({
        columns,
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
      if (openId === id) fill(panel, ...letterDetails(letter));
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

  function letterDetails(d) {
    return [
      h(
        'header',
        { class: 'panel-header' },
        h('h2', {}, d.event ?? 'Malformed entry'),
        h(
          'div',
          { class: 'panel-actions' },
          readOnly ? null : button('Replay', () => replay([d.id]), { testid: 'dl-replay', kind: 'primary' }),
          button('Close', closePanel, { kind: 'ghost', testid: 'dl-close' }),
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
      message: `Delete all ${num(total)} dead letters of group "${group}"? They cannot be replayed afterwards.`,
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
      if (state.page?.el !== el) return;
      items = page.items;
      next = page.next;
      total = page.total;
      loaded = true;
      render();
    },
  };
}

function field(label, value) {
  return [h('dt', {}, label), h('dd', {}, value)];
}

// ---------------------------------------------------------------- log

const STREAM_ID = /^\d+(-\d+)?$/;

function logPage(params) {
  const partition = params.get('partition') ?? '0';
  const from = params.get('from') ?? '';
  const eventFilter = params.get('event') ?? '';
  let entries = [];
  let next = null;
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
    const n = Math.max(count, Number(partition) + 1 || 1);
    fill(select, ...Array.from({ length: n }, (_, p) => h('option', { value: String(p) }, `P${p}`)));
    select.value = partition;
  }

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
    render();
  }

  return {
    el,
    async refresh(overview) {
      fillPartitions(overview.partitions);
      let page;
      try {
        // Entries never change once appended: after the first page, only look for new ones at the end.
        if (!loaded) page = await api(query({}));
        else if (next === null && entries.length) page = await api(query({ after: entries[entries.length - 1].offset }));
        else if (next === null) page = await api(query({}));
        else return;
      } catch (error) {
        if (error.status === 400) return fill(list, notice(error.message));
        throw error;
      }
      if (state.page?.el !== el) return;
      if (!loaded) {
        entries = page.entries;
        loaded = true;
      } else entries = entries.concat(page.entries.filter((e) => !entries.some((x) => x.offset === e.offset)));
      next = page.next;
      render();
    },
  };
}

function eventPage(partition, offset) {
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
      if (state.page?.el !== el) return;
      loaded = true;
      fill(
        body,
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
      );
    },
  };
}

// ---------------------------------------------------------------- routing and refresh

function parseRoute() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, search = ''] = hash.split('?');
  let parts;
  try {
    parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  } catch {
    return { name: 'missing' };
  }
  const params = new URLSearchParams(search);
  if (parts.length === 0) return { name: 'overview' };
  if (parts[0] === 'groups' && parts.length === 2) return { name: 'group', group: parts[1] };
  if (parts[0] === 'groups' && parts.length === 3 && parts[2] === 'dead-letters') return { name: 'deadLetters', group: parts[1] };
  if (parts[0] === 'log' && parts.length === 1) return { name: 'log', params };
  if (parts[0] === 'log' && parts.length === 3) return { name: 'event', partition: parts[1], offset: parts[2] };
  return { name: 'missing' };
}

function currentNav() {
  const name = parseRoute().name;
  return name === 'log' || name === 'event' ? 'log' : 'overview';
}

function pageFor(route) {
  switch (route.name) {
    case 'overview':
      return overviewPage();
    case 'group':
      return groupPage(route.group);
    case 'deadLetters':
      return deadLettersPage(route.group);
    case 'log':
      return logPage(route.params);
    case 'event':
      return eventPage(route.partition, route.offset);
    default:
      return {
        el: h('div', { class: 'page' }, notice('There is no such page.'), h('a', { href: '#/' }, 'Back to the overview')),
        refresh() {},
      };
  }
}

function route() {
  if (!state.started) return;
  state.page = pageFor(parseRoute());
  fill(view, state.page.el);
  window.scrollTo(0, 0);
  updateHeader();
  void refresh();
}

/** Fetches the overview (it feeds the charts on every page) and the current page's data, without reloading anything. */
async function refresh() {
  if (!state.started) return;
  if (state.inFlight) {
    state.pending = true;
    return;
  }
  state.inFlight = true;
  const scroll = window.scrollY;
  try {
    const overview = await api('overview');
    recordSamples(overview);
    state.overview = overview;
    updateHeader();
    if (state.page) await state.page.refresh(overview);
    if (window.scrollY !== scroll) window.scrollTo(0, scroll);
    setUpdated(null);
  } catch (error) {
    if (error.status !== 401) setUpdated(error);
  } finally {
    state.inFlight = false;
  }
  if (state.pending) {
    state.pending = false;
    await refresh();
  }
}

function schedule() {
  clearTimeout(state.timer);
  if (!state.started) return;
  state.timer = setTimeout(async () => {
    if (!document.hidden) await refresh();
    schedule();
  }, state.config.refreshMs);
}

function start() {
  state.started = true;
  route();
  schedule();
}

// ---------------------------------------------------------------- sign in

function signOut(error) {
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  state.started = false;
  state.page = null;
  clearTimeout(state.timer);
  showLogin(error);
}

function showLogin(error) {
  const input = h('input', {
    type: 'password',
    name: 'token',
    required: true,
    autocomplete: 'current-password',
    testid: 'token-input',
    'aria-label': 'Token',
  });
  const form = h(
    'form',
    {
      class: 'card login',
      testid: 'token-form',
      onsubmit: (event) => {
        event.preventDefault();
        state.token = input.value.trim();
        sessionStorage.setItem(TOKEN_KEY, state.token);
        start();
      },
    },
    h('h1', {}, 'Sign in'),
    h('p', { class: 'muted' }, 'This dashboard needs the bearer token set in EventrailDashboardModule.register({ auth: { token } }).'),
    error ? notice(error) : null,
    h('label', {}, 'Token', input),
    h('button', { type: 'submit', class: 'button button-primary', testid: 'token-submit' }, 'Sign in'),
  );
  fill(view, form);
  state.overview = null;
  updateHeader();
  document.getElementById('updated').textContent = '';
  input.focus();
}

async function boot() {
  for (const link of document.querySelectorAll('a[href^="#"]')) link.setAttribute('href', inPage(link.getAttribute('href')));
  document.getElementById('sign-out').addEventListener('click', () => signOut());
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) void refresh();
  });
  window.addEventListener('hashchange', route);
  try {
    const response = await fetch('api/config', { headers: { Accept: 'application/json' }, cache: 'no-store' });
    if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
    state.config = await response.json();
  } catch (error) {
    fill(view, notice(`Cannot load the dashboard configuration: ${error.message}`));
    return;
  }
  if (state.config.authRequired && !state.token) showLogin();
  else start();
}

void boot();
