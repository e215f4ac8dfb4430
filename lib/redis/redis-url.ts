/**
 * The URL schemes eventrail connects with. Valkey spells them `valkey://` and
 * `valkeys://`; they mean `redis://` and `rediss://` (TLS), which is what
 * ioredis parses, so an alias is rewritten before a client sees it.
 */
const SCHEME = /^(?:rediss?|valkeys?):\/\//i;
const VALKEY_SCHEME = /^valkey(s?):\/\//i;

/** Whether `url` starts with one of the four schemes. */
export function hasRedisScheme(url: string): boolean {
  return SCHEME.test(url);
}

/** `url` with `valkey://` / `valkeys://` rewritten to `redis://` / `rediss://`; anything else unchanged. */
export function normalizeRedisUrl(url: string): string {
  return url.replace(VALKEY_SCHEME, (_, tls: string) => `redis${tls.toLowerCase()}://`);
}
