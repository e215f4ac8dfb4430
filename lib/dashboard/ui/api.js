// The dashboard's JSON API, and the bearer token it needs (kept in sessionStorage, so it lasts as long as the tab).
/* global sessionStorage, fetch, location, history -- browser globals: this file runs in the page, not in Node */

const TOKEN_KEY = 'eventrail.dashboard.token';
/** Rows per list request. */
export const PAGE_SIZE = 50;

let token = sessionStorage.getItem(TOKEN_KEY);
/** Called when the API refuses the token; set only when the server asks for one. */
let tokenRefused = null;

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function hasToken() {
  return Boolean(token);
}

export function setToken(value) {
  token = value;
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function clearToken() {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
}

/**
 * The link the server logs carries the token in its fragment (`#token=...`), which a browser never sends:
 * take it into sessionStorage and replace the fragment with the overview's, so that the token leaves the
 * address bar and the history entry before anything else runs.
 */
export function takeTokenFromFragment() {
  const match = /^#token=([^&/?]+)/.exec(location.hash);
  if (!match) return;
  let value;
  try {
    value = decodeURIComponent(match[1]);
  } catch {
    return;
  }
  setToken(value);
  history.replaceState(null, '', `${location.pathname}${location.search}#/`);
}

export function onTokenRefused(handler) {
  tokenRefused = handler;
}

/** `api/config`, which says whether a token is needed, so it is asked for without one. */
export async function loadConfig() {
  const response = await fetch('api/config', { headers: { Accept: 'application/json' }, cache: 'no-store' });
  if (!response.ok) {
    // The refusal of another machine or site says why; show that rather than the bare status.
    const body = await response.json().catch(() => null);
    const error = new Error(messageOf(body, `${response.status} ${response.statusText}`));
    error.status = response.status;
    throw error;
  }
  const config = await response.json();
  // A proxy's page or an empty answer where the configuration should be: not something to start on.
  if (config === null || typeof config !== 'object') throw new Error('the answer is not the dashboard configuration');
  return config;
}

function messageOf(body, fallback) {
  const message = body && typeof body === 'object' ? body.message : null;
  if (Array.isArray(message)) return message.join('; ');
  return typeof message === 'string' && message ? message : fallback;
}

/** Calls `api/<path>` and returns the parsed body; throws an ApiError with the server's message. */
export async function api(path, { method = 'GET', body } = {}) {
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
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
  if (response.status === 401 && tokenRefused) {
    tokenRefused();
    throw new ApiError(401, 'Unauthorized');
  }
  if (!response.ok) throw new ApiError(response.status, messageOf(parsed, `${response.status} ${response.statusText}`));
  return parsed;
}
