/**
 * Redis URLs carry passwords (`redis://user:password@host`, `?password=`),
 * and URLs end up in error messages, logs and the CLI's output. One rule for
 * showing a URL, wherever it is shown:
 *
 * - a Redis URL (it starts with `redis://`, `rediss://`, `valkey://` or `valkeys://` and parses) keeps
 *   its user; its password and a `password` query parameter become `***`.
 * - Anything else may hold a password where a URL parser would not look for
 *   one: a mistyped scheme (`redis:/`, `rediss:`), no scheme at all
 *   (`user:password@host`), a password that should have been percent-encoded
 *   (`redis://user:a/b@host` does not parse). Everything from its scheme to
 *   its last `@` becomes `***`, and so does a `password` query parameter.
 */

const REDIS_URL = /^(?:rediss?|valkeys?):\/\//;
// The scheme as typed, with whatever slashes follow it: `redis:/`, `valkey://`, `app:`.
const SCHEME = /^[a-z][\w+.-]*:\/*/i;
const PASSWORD_PARAM = /([?&]password=)[^&#\s"']*/gi;
// The password of `scheme://user:password@host`, in any text: up to the last `@` before the host, as URL parsing
// reads it (so a password may hold `@` and `,`). Not `redis://[user:password@]host`, a usage hint.
const PASSWORD_IN_TEXT = /\b([a-z][a-z\d+.-]*:\/\/[^\s/?#:[\]]*:)[^\s/?#]*@/gi;

/** `url` as a message may show it: see the rule above. */
export function redactUrl(url: string): string {
  const parsed = parseRedisUrl(url);
  if (parsed === null) return hideUserinfo(url).replace(PASSWORD_PARAM, '$1***');
  if (parsed.password) parsed.password = '***';
  if (parsed.searchParams.has('password')) parsed.searchParams.set('password', '***');
  return parsed.toString().replace(/\/$/, '');
}

/** Whether `redactUrl` hides something in `url`. */
export function hasPassword(url: string): boolean {
  const parsed = parseRedisUrl(url);
  if (parsed === null) return url.includes('@') || /[?&]password=/i.test(url);
  return parsed.password !== '' || parsed.searchParams.has('password');
}

/**
 * `text` with the password of every URL in it shown as `***`: the last guard
 * of error messages and logs, which may quote a URL nobody redacted (a
 * library message, a mistyped command echoed by the parser). In free text a
 * URL's end is a guess, so only the password of `scheme://user:password@`
 * and `password=` parameters are hidden.
 */
export function redactUrlsIn(text: string): string {
  return text.replace(PASSWORD_IN_TEXT, '$1***@').replace(PASSWORD_PARAM, '$1***');
}

function parseRedisUrl(url: string): URL | null {
  if (!REDIS_URL.test(url)) return null;
  try {
    return new URL(url);
  } catch {
    return null;
  }
}

function hideUserinfo(url: string): string {
  const at = url.lastIndexOf('@');
  if (at < 0) return url;
  const scheme = SCHEME.exec(url)?.[0] ?? '';
  return `${scheme}***${url.slice(at)}`;
}
