import { InvalidOptionError } from '../errors/invalid-option.error';
import { DEFAULT_STALE_GROUP_MS } from '../admin/group-facts.reader';
import { checkBoolean, checkInteger, checkObject, optionalInteger, optionNames, rejectUnknownKeys } from '../config/option-checks';
import type { S3Options } from './archive/s3.archive-sink';

/** Archive to a directory: one gzipped JSONL file per id range. */
export interface FsArchiveOptions {
  driver: 'fs';
  /**
   * Directory the archives are written under (created when missing). Every instance that may run a
   * cycle must see the same directory (a shared volume), or enable retention on one instance only.
   */
  dir: string;
  /**
   * Most entries in one archive file; a longer range is split into several files.
   * @default 10000
   */
  maxEntriesPerObject?: number;
}

/** Archive to S3 or an S3-compatible store (MinIO, R2, s3rver ...) through `@aws-sdk/client-s3`, an optional peer. */
export interface S3ArchiveOptions {
  driver: 's3';
  bucket: string;
  /**
   * Key prefix inside the bucket, such as `archives/`; a `/` is added when missing.
   * @default ''
   */
  prefix?: string;
  /** @default process.env.AWS_REGION ?? 'us-east-1' */
  region?: string;
  /** Endpoint of an S3-compatible store, e.g. `http://127.0.0.1:9000`. @default AWS S3 */
  endpoint?: string;
  /** Static credentials. @default the AWS SDK's default credential chain (env, profile, instance role) */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  /**
   * Address buckets as `<endpoint>/<bucket>` rather than `<bucket>.<endpoint>`, which most S3-compatible stores need.
   * @default true
   */
  forcePathStyle?: boolean;
  /**
   * Most entries in one archive object; a longer range is split into several objects.
   * @default 10000
   */
  maxEntriesPerObject?: number;
}

export type ArchiveOptions = FsArchiveOptions | S3ArchiveOptions;

/**
 * Scheduled trimming of the log (module option `retention`). A cycle never removes an entry that a live
 * group has not committed, whatever `maxLen` and `maxAgeMs` ask.
 */
export interface RetentionOptions {
  /**
   * Schedule the cycle with `@nestjs/schedule` (the app must import `ScheduleModule.forRoot()`). With `false`,
   * nothing is scheduled, but `EventrailRetention.runOnce()` and archive restores still work with these options.
   */
  enabled: boolean;
  /**
   * How often a cycle runs: a duration (`'30s'`, `'1m'`, `'1h'`, `'500ms'`), milliseconds as a number, or a
   * cron expression with 5 or 6 fields (`'0 * * * *'`).
   * @default '1m'
   */
  every?: string | number;
  /** Keep at most the newest `maxLen` entries per partition (fewer when groups are done with them and `maxAgeMs` says so). @default no limit */
  maxLen?: number;
  /** Remove entries older than this (by their stream id's time). @default no limit */
  maxAgeMs?: number;
  /**
   * Trim with `XTRIM ... ~`: Redis removes whole internal nodes only, which is cheaper but leaves a few more entries.
   * @default false
   */
  approximate?: boolean;
  /** Keep at most this many dead letters per group (`XTRIM MAXLEN`). Dead letters are not archived. @default no limit */
  deadLetterMaxLen?: number;
  /**
   * A group whose members have all been gone longer than this stops holding the log back (with a warning naming it).
   * @default 86400000 (24 h, as `EventrailAdmin.pruneStaleGroups`)
   */
  staleGroupMs?: number;
  /** Archive every entry before it is trimmed; a failed archive means no trim for that partition. @default no archive */
  archive?: ArchiveOptions;
  /**
   * Without `archive`, trim entries that were never archived even though this log has been archived
   * (an archive mark exists for the partition): an instance or a CLI run that lacks the fleet's archive
   * settings would otherwise delete what the archiving instance has not saved yet. Without this, such a
   * caller trims only entries some archive already has, and reports the rest as held back.
   * @default false
   */
  allowUnarchivedTrim?: boolean;
}

export type RetentionSchedule = { kind: 'interval'; ms: number } | { kind: 'cron'; expression: string };

export type ResolvedArchiveOptions =
  { driver: 'fs'; dir: string; maxEntriesPerObject: number } | ({ driver: 's3'; maxEntriesPerObject: number } & S3Options);

export interface ResolvedRetentionOptions {
  enabled: boolean;
  schedule: RetentionSchedule;
  maxLen: number | undefined;
  maxAgeMs: number | undefined;
  approximate: boolean;
  deadLetterMaxLen: number | undefined;
  staleGroupMs: number;
  archive: ResolvedArchiveOptions | undefined;
  /** Present (true) only when set: the resolved options of a retention that does not set it stay as they were. */
  allowUnarchivedTrim?: true;
}

export const RETENTION_DEFAULTS = Object.freeze({
  every: '1m',
  approximate: false,
  staleGroupMs: DEFAULT_STALE_GROUP_MS,
  maxEntriesPerObject: 10_000,
  s3Region: 'us-east-1',
  forcePathStyle: true,
  allowUnarchivedTrim: false,
});

const MIN_INTERVAL_MS = 100;
const MAX_MS = 365 * 86_400_000;
const DURATION = /^(\d+)\s*(ms|s|m|h|d)$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const CRON_FIELD = /^[0-9A-Za-z*/,?#LW-]+$/;
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
export const RETENTION_OPTION_NAMES = optionNames<RetentionOptions>()([
  'enabled',
  'every',
  'maxLen',
  'maxAgeMs',
  'approximate',
  'deadLetterMaxLen',
  'staleGroupMs',
  'archive',
  'allowUnarchivedTrim',
]);
export const FS_ARCHIVE_OPTION_NAMES = optionNames<FsArchiveOptions>()(['driver', 'dir', 'maxEntriesPerObject']);
export const S3_ARCHIVE_OPTION_NAMES = optionNames<S3ArchiveOptions>()([
  'driver',
  'bucket',
  'prefix',
  'region',
  'endpoint',
  'credentials',
  'forcePathStyle',
  'maxEntriesPerObject',
]);
const KNOWN_DRIVER_OPTIONS = [...new Set([...FS_ARCHIVE_OPTION_NAMES, ...S3_ARCHIVE_OPTION_NAMES])];

/** Applies the defaults of `retention` once and validates it, naming the option that is wrong. */
export function resolveRetentionOptions(
  options: RetentionOptions | undefined,
  env: NodeJS.ProcessEnv = process.env,
): ResolvedRetentionOptions | undefined {
  if (options === undefined) return undefined;
  checkObject('retention', options, 'an object of retention options');
  rejectUnknownKeys('retention', options, RETENTION_OPTION_NAMES);
  const enabled = checkBoolean('retention.enabled', options.enabled);
  const maxLen = optionalInteger('retention.maxLen', options.maxLen, 0, Number.MAX_SAFE_INTEGER);
  const maxAgeMs = optionalInteger('retention.maxAgeMs', options.maxAgeMs, 1, 100 * MAX_MS);
  const deadLetterMaxLen = optionalInteger('retention.deadLetterMaxLen', options.deadLetterMaxLen, 0, Number.MAX_SAFE_INTEGER);
  if (enabled && maxLen === undefined && maxAgeMs === undefined && deadLetterMaxLen === undefined) {
    throw new InvalidOptionError('retention', options, 'at least one of maxLen, maxAgeMs or deadLetterMaxLen when enabled');
  }
  const approximate = checkBoolean('retention.approximate', options.approximate ?? RETENTION_DEFAULTS.approximate);
  const allowUnarchivedTrim = checkBoolean(
    'retention.allowUnarchivedTrim',
    options.allowUnarchivedTrim ?? RETENTION_DEFAULTS.allowUnarchivedTrim,
  );
  const staleGroupMs = optionalInteger('retention.staleGroupMs', options.staleGroupMs, 0, MAX_MS) ?? RETENTION_DEFAULTS.staleGroupMs;
  return {
    enabled,
    schedule: parseSchedule('retention.every', options.every ?? RETENTION_DEFAULTS.every),
    maxLen,
    maxAgeMs,
    approximate,
    deadLetterMaxLen,
    staleGroupMs,
    archive: options.archive === undefined ? undefined : resolveArchive(options.archive, env),
    ...(allowUnarchivedTrim ? { allowUnarchivedTrim } : {}),
  };
}

/** `'1m'`, `'500ms'`, a number of ms, or a cron expression (checked fully when the job is created). */
export function parseSchedule(path: string, every: unknown): RetentionSchedule {
  const expected = `a duration such as '30s', '1m' or '1h' (at least ${MIN_INTERVAL_MS} ms), milliseconds, or a cron expression`;
  if (typeof every === 'number') {
    return { kind: 'interval', ms: checkInteger(path, every, MIN_INTERVAL_MS, MAX_MS, expected) };
  }
  if (typeof every !== 'string') throw new InvalidOptionError(path, every, expected);
  const text = every.trim();
  const duration = DURATION.exec(text);
  if (duration) {
    const ms = Number(duration[1]) * UNIT_MS[duration[2]];
    if (ms < MIN_INTERVAL_MS || ms > MAX_MS) throw new InvalidOptionError(path, every, expected);
    return { kind: 'interval', ms };
  }
  const fields = text.split(/\s+/);
  if ((fields.length === 5 || fields.length === 6) && fields.every((field) => CRON_FIELD.test(field))) {
    return { kind: 'cron', expression: fields.join(' ') };
  }
  throw new InvalidOptionError(path, every, expected);
}

function resolveArchive(archive: ArchiveOptions, env: NodeJS.ProcessEnv): ResolvedArchiveOptions {
  checkObject('retention.archive', archive, "{ driver: 'fs', dir } or { driver: 's3', bucket, ... }");
  const maxEntriesPerObject =
    optionalInteger('retention.archive.maxEntriesPerObject', archive.maxEntriesPerObject, 1, 1_000_000) ??
    RETENTION_DEFAULTS.maxEntriesPerObject;
  if (archive.driver === 'fs') {
    rejectUnknownKeys('retention.archive', archive, FS_ARCHIVE_OPTION_NAMES);
    if (typeof archive.dir !== 'string' || archive.dir.trim() === '') {
      throw new InvalidOptionError('retention.archive.dir', archive.dir, 'a directory path');
    }
    return { driver: 'fs', dir: archive.dir, maxEntriesPerObject };
  }
  if (archive.driver === 's3') {
    rejectUnknownKeys('retention.archive', archive, S3_ARCHIVE_OPTION_NAMES);
    if (typeof archive.bucket !== 'string' || !BUCKET.test(archive.bucket)) {
      throw new InvalidOptionError(
        'retention.archive.bucket',
        archive.bucket,
        'an S3 bucket name (3 to 63 lower-case letters, digits, "." or "-")',
      );
    }
    const prefix = archive.prefix ?? '';
    if (typeof prefix !== 'string' || prefix.startsWith('/')) {
      throw new InvalidOptionError('retention.archive.prefix', prefix, 'a key prefix not starting with "/"');
    }
    const region = archive.region ?? env.AWS_REGION ?? RETENTION_DEFAULTS.s3Region;
    if (typeof region !== 'string' || region === '') throw new InvalidOptionError('retention.archive.region', region, 'an AWS region');
    if (archive.endpoint !== undefined && (typeof archive.endpoint !== 'string' || !/^https?:\/\/[^\s]+$/.test(archive.endpoint))) {
      throw new InvalidOptionError('retention.archive.endpoint', archive.endpoint, 'an http:// or https:// URL');
    }
    const credentials = archive.credentials;
    if (
      credentials !== undefined &&
      (credentials === null ||
        typeof credentials !== 'object' ||
        typeof credentials.accessKeyId !== 'string' ||
        credentials.accessKeyId === '' ||
        typeof credentials.secretAccessKey !== 'string' ||
        credentials.secretAccessKey === '')
    ) {
      throw new InvalidOptionError('retention.archive.credentials', '(hidden)', '{ accessKeyId, secretAccessKey } as non-empty strings');
    }
    const forcePathStyle = checkBoolean('retention.archive.forcePathStyle', archive.forcePathStyle ?? RETENTION_DEFAULTS.forcePathStyle);
    return {
      driver: 's3',
      bucket: archive.bucket,
      prefix: prefix === '' || prefix.endsWith('/') ? prefix : `${prefix}/`,
      region,
      endpoint: archive.endpoint,
      credentials,
      forcePathStyle,
      maxEntriesPerObject,
    };
  }
  // A driver that is neither: a misspelt key next to it is still named as such.
  rejectUnknownKeys('retention.archive', archive, KNOWN_DRIVER_OPTIONS);
  throw new InvalidOptionError('retention.archive.driver', (archive as { driver: unknown }).driver, "'fs' or 's3'");
}
