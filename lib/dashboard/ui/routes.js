// The hash URLs of the pages, both ways: the links pages build and the parser the router uses.
/* global location, URLSearchParams -- browser globals: this file runs in the page, not in Node */

export const enc = encodeURIComponent;

export const groupHref = (name) => `#/groups/${enc(name)}`;
export const deadLettersHref = (name) => `#/groups/${enc(name)}/dead-letters`;
export const eventHref = (partition, offset) => `#/log/${enc(partition)}/${enc(offset)}`;

/** The route in `location.hash`: `{ name, ...its parameters }`, `missing` when nothing matches. */
export function parseRoute() {
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

/** Which top-bar link the current page belongs under. */
export function currentNav() {
  const name = parseRoute().name;
  return name === 'log' || name === 'event' ? 'log' : 'overview';
}
