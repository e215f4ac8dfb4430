import { EventrailError } from './eventrail.error';

/** A module, group or decorator option is not valid. Thrown at startup. */
export class InvalidOptionError extends EventrailError {
  constructor(
    readonly option: string,
    readonly value: unknown,
    readonly expected: string,
  ) {
    super(`Invalid eventrail option ${option}: got ${describe(value)}, expected ${expected}`);
  }
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? 'an invalid Date' : `Date(${value.toISOString()})`;
  try {
    return JSON.stringify(value) ?? typeof value;
  } catch {
    return typeof value;
  }
}
