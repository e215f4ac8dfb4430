import { InvalidEventDataError } from '../errors/invalid-event-data.error';
import { InvalidEventNameError } from '../errors/invalid-event-name.error';
import { InvalidHeadersError } from '../errors/invalid-headers.error';
import { describeError } from '../util/describe-error';

export const MAX_EVENT_NAME_LENGTH = 256;
/**
 * Deepest nesting of arrays and objects in event data. `JSON.stringify`
 * recurses per level and overflows the stack a few thousand levels down (about
 * 8000 on Node's default stack, fewer when called from deep in a stack); no
 * real payload comes near 1000.
 */
export const MAX_DATA_DEPTH = 1000;
/** Most headers on one event. */
export const MAX_HEADERS = 64;
/** Longest header name, in UTF-8 bytes. */
export const MAX_HEADER_NAME_BYTES = 256;
/** Longest header value, in UTF-8 bytes (a `traceparent` is 55, a `tracestate` at most 512). */
export const MAX_HEADER_VALUE_BYTES = 8 * 1024;
// C0 controls, DEL and C1 controls.
// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f-\u009f]/;

export function validateEventName(event: unknown): asserts event is string {
  if (typeof event !== 'string') throw new InvalidEventNameError(event, 'must be a string');
  if (event.length === 0) throw new InvalidEventNameError(event, 'must not be empty');
  if (event.length > MAX_EVENT_NAME_LENGTH) {
    throw new InvalidEventNameError(event.slice(0, 40) + '...', `is ${event.length} characters, over ${MAX_EVENT_NAME_LENGTH}`);
  }
  if (CONTROL_CHARS.test(event)) throw new InvalidEventNameError(event, 'must not contain control characters');
}

/**
 * Throws unless `value` survives `JSON.stringify` / `JSON.parse` unchanged:
 * only null, booleans, finite numbers, strings, arrays and plain objects, no
 * cycles, and at most `MAX_DATA_DEPTH` levels deep. The error names the path
 * of the first offending value.
 */
export function validateJsonData(event: string, value: unknown): void {
  jsonBytesBound(event, value);
}

/**
 * `validateJsonData`, answering what the same walk learns on the way: a
 * bound on the UTF-8 bytes of `JSON.stringify(value)` (every character
 * escaped, every number as long as a number's text gets), so a caller can
 * tell an event cannot be over a payload limit without serialising it yet.
 * Infinity when it cannot say (data with a toJSON, a getter that answered
 * differently on the second walk).
 */
export function jsonBytesBound(event: string, value: unknown): number {
  // One array of ancestors serves every walk (a fresh one grows to room for 17 each time); a getter that
  // publishes from inside a walk gets its own.
  const ancestors = spareAncestors ?? [];
  spareAncestors = undefined;
  try {
    // The fast walk builds no path strings; only a failure walks again to name the path.
    const bound = plainJsonBound(value, ancestors);
    if (bound >= 0) return bound;
    checkValue(event, value, 'data', []);
    // The second walk found nothing wrong (a getter that answered differently): no bound.
    return Number.POSITIVE_INFINITY;
  } catch (error) {
    if (error instanceof InvalidEventDataError) throw error;
    // A getter or a proxy trap that throws: JSON.stringify would throw it too.
    throw new InvalidEventDataError(event, 'data', `cannot be read (${describeError(error)})`);
  } finally {
    // A walk that passed popped what it pushed (setting the length would give the array's room back).
    if (ancestors.length !== 0) ancestors.length = 0;
    spareAncestors = ancestors;
  }
}

let spareAncestors: object[] | undefined = [];

/**
 * The most characters `JSON.stringify` writes for a finite number: a sign, `0.`, five zeros and 17
 * significant digits (`-0.0000012345678901234567`), and more than any exponent form.
 */
const NUMBER_BYTES = 26;
/** The most UTF-8 bytes `JSON.stringify` writes for one UTF-16 unit of a string: `\u001f`, or a lone surrogate. */
const STRING_UNIT_BYTES = 6;

/** -1 unless `value` is plain JSON (see `validateJsonData`); else a bound on the UTF-8 bytes of its JSON. */
function plainJsonBound(value: unknown, ancestors: object[]): number {
  switch (typeof value) {
    case 'string':
      return 2 + STRING_UNIT_BYTES * value.length;
    case 'boolean':
      return 5;
    case 'number':
      return Number.isFinite(value) ? NUMBER_BYTES : -1;
    case 'object':
      break;
    default:
      return -1;
  }
  if (value === null) return 4;
  // JSON.stringify writes what a toJSON answers (own or inherited, enumerable or not, on an array too), not
  // the members counted here: no bound, so the data is serialised and weighed before anything is sent.
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return -1;
  // The depth check comes first: it also bounds the cost of the cycle check below.
  if (ancestors.length >= MAX_DATA_DEPTH || ancestors.includes(value)) return -1;
  ancestors.push(value);
  // Brackets, and a comma or colon and quotes per member (counted generously).
  let bound = 2;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      if (!(i in value)) return -1;
      const item = plainJsonBound(value[i], ancestors);
      if (item < 0) return -1;
      bound += item + 1;
    }
  } else {
    const proto = Object.getPrototypeOf(value) as object | null;
    if (proto !== Object.prototype && proto !== null) return -1;
    for (const key in value) {
      const item = plainJsonBound((value as Record<string, unknown>)[key], ancestors);
      if (item < 0) return -1;
      bound += STRING_UNIT_BYTES * key.length + 4 + item;
    }
  }
  ancestors.pop();
  return bound;
}

function checkValue(event: string, value: unknown, path: string, ancestors: object[]): void {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) throw new InvalidEventDataError(event, path, `is ${value}, which JSON turns into null`);
      return;
    case 'undefined':
      throw new InvalidEventDataError(event, path, 'is undefined, which JSON drops');
    case 'function':
      throw new InvalidEventDataError(event, path, 'is a function, which JSON drops');
    case 'symbol':
      throw new InvalidEventDataError(event, path, 'is a symbol, which JSON drops');
    case 'bigint':
      throw new InvalidEventDataError(event, path, 'is a BigInt, which JSON cannot encode (send it as a string)');
  }
  if (value === null) return;
  const object = value as object;
  if (ancestors.length >= MAX_DATA_DEPTH) {
    throw new InvalidEventDataError(event, shortPath(path), `nests more than ${MAX_DATA_DEPTH} levels of arrays and objects`);
  }
  if (ancestors.includes(object)) throw new InvalidEventDataError(event, path, 'is a circular reference');
  if (Array.isArray(object)) {
    ancestors.push(object);
    for (let i = 0; i < object.length; i++) {
      if (!(i in object))
        throw new InvalidEventDataError(event, `${path}[${i}]`, 'is a hole in a sparse array, which JSON turns into null');
      checkValue(event, object[i], `${path}[${i}]`, ancestors);
    }
    ancestors.pop();
    return;
  }
  const proto = Object.getPrototypeOf(object) as object | null;
  if (proto !== Object.prototype && proto !== null) {
    const name = (object as { constructor?: { name?: string } }).constructor?.name ?? 'an object with a prototype';
    throw new InvalidEventDataError(event, path, `is an instance of ${name}, which JSON does not keep (convert it to plain data first)`);
  }
  ancestors.push(object);
  for (const key in object) {
    checkValue(event, (object as Record<string, unknown>)[key], childPath(path, key), ancestors);
  }
  ancestors.pop();
}

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

function childPath(path: string, key: string): string {
  return IDENTIFIER.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/** A path a thousand levels deep is unreadable in a message: its start says where. */
function shortPath(path: string): string {
  return path.length > 120 ? `${path.slice(0, 120)}...` : path;
}

/**
 * Throws unless `headers` is a plain object of at most `MAX_HEADERS` string
 * values, each name non-empty, free of control characters and at most
 * `MAX_HEADER_NAME_BYTES`, each value at most `MAX_HEADER_VALUE_BYTES`.
 * The error names the header.
 */
export function validateHeaders(event: string, headers: unknown): asserts headers is Record<string, string> {
  if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) {
    throw new InvalidHeadersError(event, '(all)', 'is not an object of string values');
  }
  try {
    checkHeaders(event, headers as Record<string, unknown>);
  } catch (error) {
    if (error instanceof InvalidHeadersError) throw error;
    // A getter or a proxy trap that throws.
    throw new InvalidHeadersError(event, '(all)', `cannot be read (${describeError(error)})`);
  }
}

function checkHeaders(event: string, headers: Record<string, unknown>): void {
  const proto = Object.getPrototypeOf(headers) as object | null;
  // A Map or a class instance would be sent as {} (JSON keeps own fields only).
  if (proto !== Object.prototype && proto !== null) throw new InvalidHeadersError(event, '(all)', 'is not a plain object');
  // JSON.stringify would write what a toJSON answers (own non-enumerable, or inherited), past every check below.
  if (typeof headers.toJSON === 'function')
    throw new InvalidHeadersError(event, '(all)', 'has a toJSON, which JSON would send instead of the headers');
  // Counted before any value is read, so a huge object fails at once.
  const names = Object.keys(headers);
  if (names.length > MAX_HEADERS) {
    throw new InvalidHeadersError(event, headerLabel(names[MAX_HEADERS]), `is one of ${names.length} headers, over ${MAX_HEADERS}`);
  }
  for (const name of names) {
    if (name.length === 0) throw new InvalidHeadersError(event, '""', 'has an empty name');
    if (overBytes(name, MAX_HEADER_NAME_BYTES)) {
      throw new InvalidHeadersError(
        event,
        headerLabel(name),
        `has a name of ${Buffer.byteLength(name)} bytes, over ${MAX_HEADER_NAME_BYTES}`,
      );
    }
    if (CONTROL_CHARS.test(name)) throw new InvalidHeadersError(event, headerLabel(name), 'has control characters in its name');
    const value = headers[name];
    if (typeof value !== 'string') {
      throw new InvalidHeadersError(event, headerLabel(name), `has a ${typeof value} value; header values must be strings`);
    }
    if (overBytes(value, MAX_HEADER_VALUE_BYTES)) {
      throw new InvalidHeadersError(
        event,
        headerLabel(name),
        `has a value of ${Buffer.byteLength(value)} bytes, over ${MAX_HEADER_VALUE_BYTES}`,
      );
    }
  }
}

/** The header's name as the error shows it: quoted, control characters escaped, a long one cut. */
function headerLabel(name: string): string {
  return name.length > 64 ? `${JSON.stringify(name.slice(0, 64))}...` : JSON.stringify(name);
}

/** Whether `text` is over `max` bytes in UTF-8, counted only when its UTF-16 length does not settle it. */
function overBytes(text: string, max: number): boolean {
  // Every UTF-16 unit is at least one UTF-8 byte and at most three.
  if (text.length > max) return true;
  return text.length * 3 > max && Buffer.byteLength(text, 'utf8') > max;
}
