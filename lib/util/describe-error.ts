/**
 * What a caught value says about itself, read without ever throwing. A
 * handler may throw anything: a string, `undefined`, a symbol, an object
 * without a prototype (no `toString`), one whose `toString` or `message`
 * getter throws, a Proxy whose traps throw. Building a log line or a dead
 * letter from such a value must not fail in turn, or the entry is never done
 * and its partition re-reads it forever.
 */
export interface ThrownDescription {
  /** The error's `name` for an `Error`; for anything else, what kind of value was thrown (`string`, `object`, ...). */
  name: string;
  message: string;
  stack: string | undefined;
}

/** Said of a value that could not be turned into text at all (every way of reading it threw). */
const UNDESCRIBABLE = 'a thrown value that cannot be described';

/** Name, message and stack of anything thrown; never throws. */
export function describeThrown(value: unknown): ThrownDescription {
  if (isError(value)) {
    return {
      name: text(() => value.name) || 'Error',
      message: text(() => value.message) ?? UNDESCRIBABLE,
      stack: attempt(() => (typeof value.stack === 'string' ? value.stack : undefined)),
    };
  }
  return { name: kindOf(value), message: textOf(value), stack: undefined };
}

/**
 * The message of anything thrown, for a log line or an error of our own:
 * code may throw values that are not `Error`s. Producers' text can be in it,
 * so a log line that shows it goes through `escapeControls`. Never throws.
 */
export function describeError(error: unknown): string {
  return describeThrown(error).message;
}

/** The stack of anything thrown, for `Logger.error`'s second argument; undefined for a non-`Error`. Never throws. */
export function errorStack(error: unknown): string | undefined {
  return isError(error) ? attempt(() => (typeof error.stack === 'string' ? error.stack : undefined)) : undefined;
}

/** `instanceof Error`, false when asking throws (a Proxy whose `getPrototypeOf` trap throws). */
export function isError(value: unknown): value is Error {
  return attempt(() => value instanceof Error) ?? false;
}

/** `value instanceof type`, false when asking throws. */
export function isInstanceOf<T>(value: unknown, type: abstract new (...args: never[]) => T): value is T {
  return attempt(() => value instanceof type) ?? false;
}

function textOf(value: unknown): string {
  if (typeof value === 'string') return value;
  // String() covers symbols and primitives; for objects it calls their own toString, which may throw or be missing.
  const asString = text(() => String(value));
  if (asString !== undefined && asString !== '[object Object]') return asString;
  // A plain or null-prototype object says more as JSON ({"code":"E_CARD"}) than as [object Object].
  const json = attempt(() => JSON.stringify(value) as string | undefined);
  if (typeof json === 'string') return json;
  return asString ?? UNDESCRIBABLE;
}

function kindOf(value: unknown): string {
  if (value === null) return 'null';
  return typeof value;
}

/** `read()` as a string, or undefined when it throws or gives something else. */
function text(read: () => unknown): string | undefined {
  const value = attempt(read);
  if (typeof value === 'string') return value;
  if (value === undefined || value === null) return undefined;
  return attempt(() => String(value));
}

function attempt<T>(read: () => T): T | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}
