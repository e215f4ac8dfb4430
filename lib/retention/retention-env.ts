import { InvalidOptionError } from '../errors/invalid-option.error';
import { checkOneOf } from '../config/option-checks';
import type { ArchiveOptions, RetentionOptions } from './retention.options';

const STREAM_MODES = ['maxlen', 'minid', 'age', 'both', 'none'];

/**
 * Reads retention options from the environment variables of the original
 * eventrail (plus a few new ones), for `EventrailModule.forRoot({ retention:
 * retentionOptionsFromEnv() })`. It is never applied on its own: trimming is
 * destructive, so an app opts in by passing the result.
 *
 * | variable | option |
 * |---|---|
 * | `RETENTION_ENABLED` | `enabled` (`true`/`false`/`1`/`0`/`yes`/`no`; default false) |
 * | `RETENTION_INTERVAL_MS` | `every`, in milliseconds |
 * | `RETENTION_EVERY` (new) | `every`, as a duration or a cron expression |
 * | `RETENTION_STREAM_MODE` | which limits apply: `maxlen`, `minid` (alias `age`), `both` or `none`; default: those that are set |
 * | `RETENTION_STREAM_MAX_LEN` | `maxLen` |
 * | `RETENTION_STREAM_KEEP_MS` | `maxAgeMs` |
 * | `RETENTION_STREAM_APPROXIMATE` (new) | `approximate` |
 * | `RETENTION_DLQ_MAX_LEN` | `deadLetterMaxLen` |
 * | `RETENTION_STALE_GROUP_MS` (new) | `staleGroupMs` |
 * | `RETENTION_ALLOW_UNARCHIVED_TRIM` (new) | `allowUnarchivedTrim` |
 * | `RETENTION_ARCHIVE_ENABLED` | archive on/off (default: on when `RETENTION_ARCHIVE_DRIVER` is set) |
 * | `RETENTION_ARCHIVE_DRIVER` | `archive.driver`: `fs` (default) or `s3` |
 * | `RETENTION_ARCHIVE_DIR` | `archive.dir` |
 * | `RETENTION_ARCHIVE_MAX_ENTRIES` (new) | `archive.maxEntriesPerObject` |
 * | `RETENTION_S3_BUCKET`, `_PREFIX`, `_REGION`, `_ENDPOINT`, `_FORCE_PATH_STYLE` | the same `archive` options |
 * | `RETENTION_S3_ACCESS_KEY_ID`, `RETENTION_S3_SECRET_ACCESS_KEY` | `archive.credentials` (else the AWS default chain) |
 *
 * A value that cannot be read throws `InvalidOptionError` naming the variable.
 */
/** What to set for an archive, in the words of the variables: for errors of tools that need one (the CLI's archive commands). */
export const ARCHIVE_VARIABLES =
  'RETENTION_ARCHIVE_DRIVER=fs and RETENTION_ARCHIVE_DIR=<directory>, or RETENTION_ARCHIVE_DRIVER=s3 and ' +
  'RETENTION_S3_BUCKET=<bucket> (with RETENTION_S3_REGION, RETENTION_S3_ENDPOINT, RETENTION_S3_PREFIX, ' +
  'RETENTION_S3_ACCESS_KEY_ID and RETENTION_S3_SECRET_ACCESS_KEY as needed)';

export function retentionOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): RetentionOptions {
  const read = (name: string): string | undefined => {
    const value = env[name]?.trim();
    return value === undefined || value === '' ? undefined : value;
  };
  const options: RetentionOptions = { enabled: bool(read, 'RETENTION_ENABLED') ?? false };

  const intervalMs = integer(read, 'RETENTION_INTERVAL_MS');
  const every = read('RETENTION_EVERY');
  if (intervalMs !== undefined && every !== undefined) {
    throw new InvalidOptionError('RETENTION_EVERY', every, 'either RETENTION_EVERY or RETENTION_INTERVAL_MS, not both');
  }
  if (intervalMs !== undefined) options.every = intervalMs;
  if (every !== undefined) options.every = every;

  const maxLen = integer(read, 'RETENTION_STREAM_MAX_LEN');
  const keepMs = integer(read, 'RETENTION_STREAM_KEEP_MS');
  const mode = read('RETENTION_STREAM_MODE')?.toLowerCase();
  const wantsLen = mode === undefined ? maxLen !== undefined : mode === 'maxlen' || mode === 'both';
  const wantsAge = mode === undefined ? keepMs !== undefined : mode === 'minid' || mode === 'age' || mode === 'both';
  if (mode !== undefined) checkOneOf('RETENTION_STREAM_MODE', mode, STREAM_MODES, 'maxlen, minid (or age), both or none');
  if (wantsLen) {
    if (maxLen === undefined)
      throw new InvalidOptionError('RETENTION_STREAM_MAX_LEN', maxLen, `a number of entries (RETENTION_STREAM_MODE=${mode})`);
    options.maxLen = maxLen;
  }
  if (wantsAge) {
    if (keepMs === undefined)
      throw new InvalidOptionError('RETENTION_STREAM_KEEP_MS', keepMs, `milliseconds (RETENTION_STREAM_MODE=${mode})`);
    options.maxAgeMs = keepMs;
  }
  const approximate = bool(read, 'RETENTION_STREAM_APPROXIMATE');
  if (approximate !== undefined) options.approximate = approximate;
  const deadLetterMaxLen = integer(read, 'RETENTION_DLQ_MAX_LEN');
  if (deadLetterMaxLen !== undefined) options.deadLetterMaxLen = deadLetterMaxLen;
  const staleGroupMs = integer(read, 'RETENTION_STALE_GROUP_MS');
  if (staleGroupMs !== undefined) options.staleGroupMs = staleGroupMs;
  const allowUnarchivedTrim = bool(read, 'RETENTION_ALLOW_UNARCHIVED_TRIM');
  if (allowUnarchivedTrim !== undefined) options.allowUnarchivedTrim = allowUnarchivedTrim;

  const archive = archiveFromEnv(read);
  if (archive) options.archive = archive;
  return options;
}

function archiveFromEnv(read: (name: string) => string | undefined): ArchiveOptions | undefined {
  const driver = read('RETENTION_ARCHIVE_DRIVER')?.toLowerCase();
  const enabled = bool(read, 'RETENTION_ARCHIVE_ENABLED') ?? driver !== undefined;
  if (!enabled) return undefined;
  const maxEntriesPerObject = integer(read, 'RETENTION_ARCHIVE_MAX_ENTRIES');
  const limit = maxEntriesPerObject === undefined ? {} : { maxEntriesPerObject };
  if (driver === undefined || driver === 'fs') {
    const dir = read('RETENTION_ARCHIVE_DIR');
    if (dir === undefined) throw new InvalidOptionError('RETENTION_ARCHIVE_DIR', dir, 'a directory for the fs archive');
    return { driver: 'fs', dir, ...limit };
  }
  if (driver !== 's3') throw new InvalidOptionError('RETENTION_ARCHIVE_DRIVER', driver, 'fs or s3');
  const bucket = read('RETENTION_S3_BUCKET');
  if (bucket === undefined) throw new InvalidOptionError('RETENTION_S3_BUCKET', bucket, 'a bucket name for the s3 archive');
  const archive: ArchiveOptions = { driver: 's3', bucket, ...limit };
  const prefix = read('RETENTION_S3_PREFIX');
  const region = read('RETENTION_S3_REGION');
  const endpoint = read('RETENTION_S3_ENDPOINT');
  const forcePathStyle = bool(read, 'RETENTION_S3_FORCE_PATH_STYLE');
  const accessKeyId = read('RETENTION_S3_ACCESS_KEY_ID');
  const secretAccessKey = read('RETENTION_S3_SECRET_ACCESS_KEY');
  if (prefix !== undefined) archive.prefix = prefix;
  if (region !== undefined) archive.region = region;
  if (endpoint !== undefined) archive.endpoint = endpoint;
  if (forcePathStyle !== undefined) archive.forcePathStyle = forcePathStyle;
  if ((accessKeyId === undefined) !== (secretAccessKey === undefined)) {
    const missing = accessKeyId === undefined ? 'RETENTION_S3_ACCESS_KEY_ID' : 'RETENTION_S3_SECRET_ACCESS_KEY';
    throw new InvalidOptionError(missing, undefined, 'both RETENTION_S3_ACCESS_KEY_ID and RETENTION_S3_SECRET_ACCESS_KEY, or neither');
  }
  if (accessKeyId !== undefined && secretAccessKey !== undefined) archive.credentials = { accessKeyId, secretAccessKey };
  return archive;
}

function bool(read: (name: string) => string | undefined, name: string): boolean | undefined {
  const value = read(name)?.toLowerCase();
  if (value === undefined) return undefined;
  if (['true', '1', 'yes', 'on'].includes(value)) return true;
  if (['false', '0', 'no', 'off'].includes(value)) return false;
  throw new InvalidOptionError(name, value, 'true or false');
}

function integer(read: (name: string) => string | undefined, name: string): number | undefined {
  const value = read(name);
  if (value === undefined) return undefined;
  if (!/^\d{1,15}$/.test(value)) throw new InvalidOptionError(name, value, 'a non-negative integer');
  return Number(value);
}
