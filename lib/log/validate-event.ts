import { InvalidEventDataError } from '../errors/invalid-event-data.error';
import { InvalidEventNameError } from '../errors/invalid-event-name.error';
import { InvalidHeadersError } from '../errors/invalid-headers.error';

export const MAX_EVENT_NAME_LENGTH = 256;
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
 * only null, booleans, finite numbers, strings, arrays and plain objects, and
 * no cycles. The error names the path of the first offending value.
 */
export function validateJsonData(event: string, value: unknown): void {
  // The fast walk builds no path strings; only a failure walks again to name the path.
  if (isPlainJson(value, [])) return;
  checkValue(event, value, 'data', []);
}

function isPlainJson(value: unknown, ancestors: object[]): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object':
      break;
    default:
      return false;
  }
  if (value === null) return true;
  if (ancestors.includes(value)) return false;
  ancestors.push(value);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      if (!(i in value) || !isPlainJson(value[i], ancestors)) return false;
    }
  } else {
    const proto = Object.getPrototypeOf(value) as object | null;
    if (proto !== Object.prototype && proto !== null) return false;
    for (const key in value) {
      if (!isPlainJson((value as Record<string, unknown>)[key], ancestors)) return false;
    }
  }
  ancestors.pop();
  return true;
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

export function validateHeaders(event: string, headers: unknown): asserts headers is Record<string, string> {
  if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) {
    throw new InvalidHeadersError(event, '(all)', 'is not an object');
  }
  for (const [name, value] of Object.entries(headers)) {
    if (name.length === 0) throw new InvalidHeadersError(event, '""', 'has an empty name');
    if (typeof value !== 'string') throw new InvalidHeadersError(event, JSON.stringify(name), `has a ${typeof value} value`);
  }
}
