// Event payloads, names and errors are untrusted: the page is built with createElement/textContent only, never innerHTML, so no value can become markup.
/* global document, window, setTimeout, clearTimeout -- browser globals: this file runs in the page, not in Node */

// The entry point: loads the configuration, asks for the token if needed, then routes `#/...` to a page and
// refreshes the overview and that page every `refreshMs`, without ever reloading the document.

import { api, clearToken, hasToken, loadConfig, onTokenRefused, setToken, takeTokenFromFragment } from './api.js';
import { deadLettersPage } from './dead-letters.page.js';
import { fill, h, inPage } from './dom.js';
import { eventPage } from './event.page.js';
import { millis } from './format.js';
import { groupPage } from './group.page.js';
import { recordSamples } from './history.js';
import { logPage } from './log.page.js';
import { overviewPage } from './overview.page.js';
import { currentNav, parseRoute } from './routes.js';
import { notice } from './widgets.js';

const view = document.getElementById('view');

const state = {
  config: { authRequired: false, readOnly: true, refreshMs: 5000 },
  /** The latest `api/overview`. */
  overview: null,
  /** The current page: { el, refresh(overview) }. */
  page: null,
  timer: 0,
  inFlight: false,
  pending: false,
  started: false,
};

// ---------------------------------------------------------------- header

function updateHeader() {
  const overview = state.overview;
  document.getElementById('read-only').hidden = !state.config.readOnly;
  document.getElementById('sign-out').hidden = !(state.config.authRequired && hasToken());
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

/** The header's connection badge turns red on an outage, instead of showing the last good state. */
function showOutage(error) {
  const what = error.status === 503 ? 'Redis unavailable' : 'Dashboard server unreachable';
  fill(document.getElementById('connection'), h('span', { class: 'dot dot-bad' }), what);
}

function setUpdated(error) {
  const el = document.getElementById('updated');
  el.classList.toggle('error', Boolean(error));
  el.textContent = error ? `Update failed: ${error.message}` : `Updated ${new Date().toLocaleTimeString()}`;
}

// ---------------------------------------------------------------- routing and refresh

function pageFor(route) {
  switch (route.name) {
    case 'overview':
      return overviewPage();
    case 'group':
      return groupPage(route.group, { readOnly: state.config.readOnly, refreshAll: refresh });
    case 'deadLetters':
      return deadLettersPage(route.group, { readOnly: state.config.readOnly, refreshAll: refresh });
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
    // A 401 with a token required signs out (onTokenRefused); anything else, a 403 "this machine only" included, is shown.
    if (error.status !== 401 || !state.config.authRequired) setUpdated(error);
    if (error.status === 503 || error.status === 0) showOutage(error);
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
  clearToken();
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
        setToken(input.value.trim());
        start();
      },
    },
    h('h1', {}, 'Sign in'),
    h(
      'p',
      { class: 'muted' },
      'This dashboard needs its bearer token: the one set in EventrailDashboardModule.register({ auth: { token } }), ' +
        'or, without one, open the link with #token=… that the app logged at startup.',
    ),
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

/**
 * The dashboard's configuration, asked for again (after 1, 2, 4, then every 10 s) while it cannot be loaded: a
 * page opened while the app restarts (a deploy) or across a dropped request comes up on its own once it answers.
 * A refusal (a 4xx: another machine or site, a wrong path) is shown and not asked again: null then.
 */
async function configLoaded() {
  for (let attempt = 0; ; attempt++) {
    try {
      return await loadConfig();
    } catch (error) {
      if (error.status >= 400 && error.status < 500) {
        fill(view, notice(`Cannot load the dashboard configuration: ${error.message}`));
        return null;
      }
      const seconds = Math.min(2 ** attempt, 10);
      fill(view, notice(`Cannot load the dashboard configuration: ${error.message}. Trying again in ${seconds} s.`));
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    }
  }
}

async function boot() {
  takeTokenFromFragment();
  for (const link of document.querySelectorAll('a[href^="#"]')) link.setAttribute('href', inPage(link.getAttribute('href')));
  document.getElementById('sign-out').addEventListener('click', () => signOut());
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) void refresh();
  });
  window.addEventListener('hashchange', route);
  const config = await configLoaded();
  if (!config) return;
  state.config = config;
  if (state.config.authRequired) onTokenRefused(() => signOut('The token was refused. Enter it again.'));
  if (state.config.authRequired && !hasToken()) showLogin();
  else start();
}

void boot();
