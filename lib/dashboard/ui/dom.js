// Element builders over createElement/textContent (never innerHTML, see app.js), plus the page-wide toasts and confirmation dialog.
/* global document, location, Node, setTimeout -- browser globals: this file runs in the page, not in Node */

const SVG_NS = 'http://www.w3.org/2000/svg';

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
export function inPage(href) {
  return href.startsWith('#') ? `${location.pathname}${location.search}${href}` : href;
}

/** `h('a', { href, class, testid, onclick }, ...children)`: strings become text nodes. */
export function h(tag, props = {}, ...children) {
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
export function fill(parent, ...children) {
  parent.replaceChildren();
  return append(parent, children);
}

export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  return append(el, children);
}

export function toast(message, kind = 'ok') {
  const el = h('div', { class: `toast toast-${kind}`, testid: 'toast' }, message);
  document.getElementById('toasts').append(el);
  setTimeout(() => el.remove(), kind === 'error' ? 8000 : 4000);
}

/** A modal confirmation; resolves true when confirmed. */
export function confirmAction(title, message, confirmLabel = 'Confirm') {
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
