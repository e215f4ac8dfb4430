import { InvalidOptionError } from '../errors/invalid-option.error';
import { isStreamId } from '../wire/stream-id';

const INTEGER = /^\d{1,9}$/;

/** Query string values arrive as strings (or arrays when repeated); these read them into admin-service options. */
export function integerParam(name: string, value: unknown, fallback?: number): number {
  if (value === undefined || value === '') {
    if (fallback === undefined) throw new InvalidOptionError(name, value, 'an integer');
    return fallback;
  }
  if (typeof value !== 'string' || !INTEGER.test(value)) throw new InvalidOptionError(name, value, 'an integer');
  return Number(value);
}

export function optionalString(name: string, value: unknown): string | undefined {
  if (value === undefined || value === '') return undefined;
  if (typeof value !== 'string') throw new InvalidOptionError(name, value, 'a single value');
  return value;
}

/** A stream id stays a string; anything else must be a date-time (ISO 8601, or Unix ms). */
export function fromParam(value: unknown): string | Date | undefined {
  const text = optionalString('from', value);
  if (text === undefined || isStreamId(text)) return text;
  const time = /^\d+$/.test(text) ? new Date(Number(text)) : new Date(text);
  if (Number.isNaN(time.getTime())) throw new InvalidOptionError('from', text, 'a stream id such as "1700000000000-0" or a date-time');
  return time;
}

/** `event=a,b` or `event=a&event=b`. */
export function listParam(name: string, value: unknown): string[] | undefined {
  if (value === undefined || value === '') return undefined;
  const parts = (Array.isArray(value) ? value : [value]).flatMap((v) => (typeof v === 'string' ? v.split(',') : [v]));
  if (parts.some((p) => typeof p !== 'string')) throw new InvalidOptionError(name, value, 'a comma-separated list');
  const list = (parts as string[]).map((p) => p.trim()).filter((p) => p !== '');
  return list.length > 0 ? list : undefined;
}

/** The replay request body: `{ "ids": [...] }` or `{ "all": true }`. */
export function replayTarget(body: unknown): readonly string[] | 'all' {
  const value = body as { ids?: unknown; all?: unknown } | null;
  if (value && typeof value === 'object' && value.all === true && value.ids === undefined) return 'all';
  if (value && typeof value === 'object' && Array.isArray(value.ids) && value.ids.length > 0 && value.all === undefined) {
    return value.ids as string[];
  }
  throw new InvalidOptionError('body', body, '{ "ids": ["<dead-letter id>", ...] } or { "all": true }');
}

/**
 * The body of a parked-keys write: `{ "key": "<parked key>" }` (`""` is the keyless line), or `{}` for every
 * parked key when `required` is false.
 */
export function parkedKeyBody(body: unknown, required: boolean): string | undefined {
  const value = body as { key?: unknown } | null;
  const object = value !== null && typeof value === 'object' && !Array.isArray(value);
  const fields = object ? Object.keys(value) : [];
  if (object && fields.every((field) => field === 'key')) {
    if (typeof value.key === 'string') return value.key;
    if (value.key === undefined && !required) return undefined;
  }
  throw new InvalidOptionError(
    'body',
    body,
    required ? '{ "key": "<parked key>" }' : '{ "key": "<parked key>" } or {} for every parked key',
  );
}
