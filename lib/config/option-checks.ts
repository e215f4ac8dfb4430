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

/**
 * A misspelt option fails rather than being ignored, naming the nearest known option when one is close
 * (`partitons`: did you mean partitions?). The value given is not shown: under a misspelt key it may be a
 * secret that no secret-named key hides. Keys in `ignored` are allowed without being offered; `path` ''
 * is the top level.
 */
export function rejectUnknownKeys(path: string, options: object, known: readonly string[], ignored: readonly string[] = []): void {
  for (const [key, value] of Object.entries(options)) {
    if (!known.includes(key) && !ignored.includes(key)) {
      const suggestion = nearestKey(key, known);
      const shown = suggestion === undefined ? 'an unknown option' : `an unknown option (did you mean ${suggestion}?)`;
      throw new InvalidOptionError(path === '' ? key : `${path}.${key}`, value, `one of the options ${known.join(', ')}`, shown);
    }
  }
}

/**
 * The known key nearest to `key` by edit distance (case-insensitive; a dropped, added, changed or swapped
 * letter costs 1), when it is near enough to be a slip: at most a third of its length, and at least 1. On a
 * tie, the first in `known`.
 */
export function nearestKey(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const distance = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (distance < bestDistance && distance <= Math.max(1, Math.floor(candidate.length / 3))) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/** Levenshtein distance with adjacent swaps (optimal string alignment). */
function editDistance(a: string, b: string): number {
  // rows[i][j]: distance between the first i letters of a and the first j of b.
  const rows: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) rows[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      rows[i][j] = Math.min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) rows[i][j] = Math.min(rows[i][j], rows[i - 2][j - 2] + 1);
    }
  }
  return rows[a.length][b.length];
}

function listChoices(allowed: readonly unknown[]): string {
  const quoted = allowed.map((choice) => `'${String(choice)}'`);
  return quoted.length < 2 ? quoted.join('') : `${quoted.slice(0, -1).join(', ')} or ${quoted[quoted.length - 1]}`;
}

/**
 * The option names of an options interface `T`, written once: `optionNames<TracingOptions>()(['enabled',
 * 'parent'])`. The build fails when the list names a key `T` does not have, or leaves one of its keys out,
 * so a list made this way can back the unknown-key check, the defaults, the typo tests and the docs test.
 */
export function optionNames<T>() {
  return <const N extends ReadonlyArray<keyof T & string>>(names: N & ListsEvery<keyof T & string, N[number]>): N => names;
}

/** `unknown` (no constraint) when `Listed` covers `Keys`; otherwise a shape the list lacks, naming what is missing. */
type ListsEvery<Keys, Listed> = [Exclude<Keys, Listed>] extends [never] ? unknown : { missingOptionNames: Exclude<Keys, Listed> };
