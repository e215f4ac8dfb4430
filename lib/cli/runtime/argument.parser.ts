import { InvalidArgumentError } from 'commander';
import { describeError } from '../../util/describe-error';
import { CliUsageError } from '../errors/cli-usage.error';

/**
 * Parsers for option and argument values. Commander reports the
 * `InvalidArgumentError`s they throw as usage errors (exit code 2), naming the option.
 */

const STREAM_ID = /^\d{1,20}-\d{1,20}$/;

export function parseCount(value: string): number {
  return parseInteger(value, 1);
}

export function parseNonNegative(value: string): number {
  return parseInteger(value, 0);
}

function parseInteger(value: string, min: number): number {
  if (!/^\d{1,15}$/.test(value) || Number(value) < min)
    throw new InvalidArgumentError(`expected an integer of at least ${min}, got "${value}".`);
  return Number(value);
}

export function parseStreamId(value: string): string {
  if (!STREAM_ID.test(value)) throw new InvalidArgumentError(`expected a stream id such as "1700000000000-0", got "${value}".`);
  return value;
}

/** An ISO 8601 date (`2024-05-01T12:00:00Z`, `2024-05-01`) or milliseconds since the epoch. */
export function parseTime(value: string): Date {
  const time = /^\d{1,15}$/.test(value) ? new Date(Number(value)) : /^\d{4}-\d{2}-\d{2}/.test(value) ? new Date(value) : null;
  if (time === null || Number.isNaN(time.getTime()))
    throw new InvalidArgumentError(`expected an ISO 8601 date (2024-05-01T12:00:00Z) or epoch milliseconds, got "${value}".`);
  return time;
}

/** A stream id or a time, for range bounds. */
export function parseIdOrTime(value: string): string | Date {
  return STREAM_ID.test(value) ? value : parseTime(value);
}

/** Repeatable `--header name=value`. */
export function collectHeader(value: string, headers: Record<string, string> = {}): Record<string, string> {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError(`expected name=value, got "${value}".`);
  return { ...headers, [value.slice(0, eq)]: value.slice(eq + 1) };
}

/** `EVENTRAIL_REDIS_CLUSTER`: unset, empty, `0`, `false` or `no` mean a single Redis; `1`, `true` or `yes` a cluster. */
export function parseClusterEnv(value: string | undefined): boolean {
  const normalized = (value ?? '').trim().toLowerCase();
  if (['1', 'true', 'yes'].includes(normalized)) return true;
  if (['', '0', 'false', 'no'].includes(normalized)) return false;
  throw new CliUsageError(`EVENTRAIL_REDIS_CLUSTER must be 1 or 0 (true/false, yes/no), got "${value}"`);
}

/** The event payload of `publish`: JSON text. Parsed before connecting, so a typo costs no round trip. */
export function parseJsonData(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new CliUsageError(`The event data is not valid JSON: ${describeError(error)}`);
  }
}
