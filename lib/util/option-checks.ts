import { InvalidOptionError } from '../errors/invalid-option.error';

/**
 * The checks every options resolver shares (module, consumer, retention,
 * dashboard, health). Each throws `InvalidOptionError(path, value, expected)`,
 * so a mistake names the option, what was given and what is accepted, in the
 * same words wherever it is made.
 */

/** `value`, an integer from `min` to `max`; `expected` says so in the error unless the caller words it itself. */
export function checkInteger(
  path: string,
  value: unknown,
  min: number,
  max: number,
  expected = `an integer from ${min} to ${max}`,
): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidOptionError(path, value, expected);
  }
  return value;
}

/** `checkInteger` for an option that may be left out: `undefined` stays `undefined`. */
export function optionalInteger(path: string, value: unknown, min: number, max: number, expected?: string): number | undefined {
  return value === undefined ? undefined : checkInteger(path, value, min, max, expected);
}

export function checkBoolean(path: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new InvalidOptionError(path, value, 'true or false');
  return value;
}

/** `value`, one of `allowed`; `expected` defaults to them quoted: `'a', 'b' or 'c'`. */
export function checkOneOf<const T>(path: string, value: unknown, allowed: readonly T[], expected = listChoices(allowed)): T {
  if (!allowed.includes(value as T)) throw new InvalidOptionError(path, value, expected);
  return value as T;
}

/** Anything but `null` or a primitive (options objects, and ioredis clients). */
export function checkObject(path: string, value: unknown, expected: string): asserts value is object {
  if (value === null || typeof value !== 'object') throw new InvalidOptionError(path, value, expected);
}

/** A misspelt option fails rather than being ignored; keys in `ignored` are allowed without being offered. */
export function rejectUnknownKeys(path: string, options: object, known: readonly string[], ignored: readonly string[] = []): void {
  for (const [key, value] of Object.entries(options)) {
    if (!known.includes(key) && !ignored.includes(key)) {
      throw new InvalidOptionError(`${path}.${key}`, value, `one of the options ${known.join(', ')}`);
    }
  }
}

function listChoices(allowed: readonly unknown[]): string {
  const quoted = allowed.map((choice) => `'${String(choice)}'`);
  return quoted.length < 2 ? quoted.join('') : `${quoted.slice(0, -1).join(', ')} or ${quoted[quoted.length - 1]}`;
}
