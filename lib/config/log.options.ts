import { InvalidOptionError } from '../errors/invalid-option.error';
import { checkInteger, optionNames } from './option-checks';

/** Where the log is and how it is laid out: what every feature that touches the log reads. */
export interface LogOptions {
  /**
   * Every Redis key lives under it, so several applications can share one Redis.
   * @default process.env.EVENTRAIL_PREFIX ?? 'eventrail'
   */
  prefix?: string;
  /**
   * Number of partition streams. Fixed once the log exists.
   * @default 1
   */
  partitions?: number;
}

export type ResolvedLogOptions = Required<LogOptions>;

export const LOG_OPTION_NAMES = optionNames<LogOptions>()(['prefix', 'partitions']);

/** `prefix` is the last fallback, after `EVENTRAIL_PREFIX`. */
export const LOG_DEFAULTS: ResolvedLogOptions = Object.freeze({ prefix: 'eventrail', partitions: 1 });

const PREFIX_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;
const MAX_PARTITIONS = 1024;

/** Applies the defaults of the log options (and `EVENTRAIL_PREFIX`) and validates them. */
export function resolveLogOptions(options: LogOptions, env: NodeJS.ProcessEnv): ResolvedLogOptions {
  const prefix = options.prefix ?? env.EVENTRAIL_PREFIX ?? LOG_DEFAULTS.prefix;
  if (typeof prefix !== 'string' || !PREFIX_PATTERN.test(prefix)) {
    throw new InvalidOptionError('prefix', prefix, 'letters, digits, ".", "_", ":" or "-", 1 to 64 characters');
  }
  const partitions = checkInteger('partitions', options.partitions ?? LOG_DEFAULTS.partitions, 1, MAX_PARTITIONS);
  return { prefix, partitions };
}
