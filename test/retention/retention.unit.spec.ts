import { gzipSync } from 'node:zlib';
import { ArchiveFormatError, InvalidOptionError, retentionOptionsFromEnv } from '../../lib';
import { resolveModuleOptions } from '../../lib/module/eventrail.options';
import { archiveName, decodeArchive, encodeArchive, parseArchiveName } from '../../lib/retention/archive/archive-file';
import { resolveRetentionOptions } from '../../lib/retention/retention.options';
import { nextStreamId } from '../../lib/wire/stream-id';
import { allowedMinId, capMinId, minIdForAge, requestedMinId } from '../../lib/retention/trim-point';

describe('retention options', () => {
  it('applies the documented defaults once', () => {
    expect(resolveModuleOptions({}, {}).retention).toBeUndefined();
    expect(resolveRetentionOptions({ enabled: true, maxLen: 100 }, {})).toEqual({
      enabled: true,
      schedule: { kind: 'interval', ms: 60_000 },
      maxLen: 100,
      maxAgeMs: undefined,
      approximate: false,
      deadLetterMaxLen: undefined,
      staleGroupMs: 86_400_000,
      archive: undefined,
    });
    expect(
      resolveRetentionOptions({ enabled: false, archive: { driver: 's3', bucket: 'logs', prefix: 'a/b' } }, { AWS_REGION: 'eu-west-3' })
        ?.archive,
    ).toEqual({
      driver: 's3',
      bucket: 'logs',
      prefix: 'a/b/',
      region: 'eu-west-3',
      endpoint: undefined,
      credentials: undefined,
      forcePathStyle: true,
      maxEntriesPerObject: 10_000,
    });
  });

  it.each<[string | number, object]>([
    ['1m', { kind: 'interval', ms: 60_000 }],
    ['30s', { kind: 'interval', ms: 30_000 }],
    ['250ms', { kind: 'interval', ms: 250 }],
    [5000, { kind: 'interval', ms: 5000 }],
    ['0 */5 * * *', { kind: 'cron', expression: '0 */5 * * *' }],
    ['*/10 * * * * *', { kind: 'cron', expression: '*/10 * * * * *' }],
  ])('reads every: %p', (every, schedule) => {
    expect(resolveRetentionOptions({ enabled: true, every, maxLen: 1 }, {})?.schedule).toEqual(schedule);
  });

  it.each<[string, object, string]>([
    ['a missing enabled', { maxLen: 1 }, 'option retention.enabled: got undefined'],
    ['no policy while enabled', { enabled: true }, 'expected at least one of maxLen, maxAgeMs or deadLetterMaxLen'],
    ['a typo', { enabled: true, maxLength: 5 }, 'option retention.maxLength'],
    ['a negative maxLen', { enabled: true, maxLen: -1 }, 'option retention.maxLen: got -1'],
    ['maxAgeMs 0', { enabled: true, maxAgeMs: 0 }, 'option retention.maxAgeMs'],
    ['a too short interval', { enabled: true, maxLen: 1, every: '10ms' }, 'option retention.every: got "10ms"'],
    ['gibberish every', { enabled: true, maxLen: 1, every: 'hourly' }, 'option retention.every'],
    ['approximate as a string', { enabled: true, maxLen: 1, approximate: 'yes' }, 'option retention.approximate'],
    ['an unknown driver', { enabled: true, maxLen: 1, archive: { driver: 'gcs' } }, 'option retention.archive.driver: got "gcs"'],
    ['an fs archive without dir', { enabled: true, maxLen: 1, archive: { driver: 'fs' } }, 'option retention.archive.dir'],
    ['a bad bucket', { enabled: true, maxLen: 1, archive: { driver: 's3', bucket: 'Bad_Bucket' } }, 'option retention.archive.bucket'],
    [
      'an s3 option on fs',
      { enabled: true, maxLen: 1, archive: { driver: 'fs', dir: '/a', bucket: 'x' } },
      'option retention.archive.bucket',
    ],
    [
      'half credentials',
      { enabled: true, maxLen: 1, archive: { driver: 's3', bucket: 'logs', credentials: { accessKeyId: 'k' } } },
      'option retention.archive.credentials: got "(hidden)"',
    ],
  ])('refuses %s, naming the option', (_, retention, message) => {
    expect(() => resolveModuleOptions({ retention } as never, {})).toThrow(InvalidOptionError);
    expect(() => resolveModuleOptions({ retention } as never, {})).toThrow(message);
  });
});

describe('retentionOptionsFromEnv', () => {
  it('reads the original eventrail variables', () => {
    expect(
      retentionOptionsFromEnv({
        RETENTION_ENABLED: 'true',
        RETENTION_INTERVAL_MS: '30000',
        RETENTION_STREAM_MODE: 'both',
        RETENTION_STREAM_MAX_LEN: '100000',
        RETENTION_STREAM_KEEP_MS: '604800000',
        RETENTION_DLQ_MAX_LEN: '1000',
        RETENTION_ARCHIVE_ENABLED: '1',
        RETENTION_ARCHIVE_DRIVER: 's3',
        RETENTION_S3_BUCKET: 'events',
        RETENTION_S3_PREFIX: 'eventrail/',
        RETENTION_S3_REGION: 'eu-central-1',
        RETENTION_S3_ENDPOINT: 'http://minio:9000',
        RETENTION_S3_ACCESS_KEY_ID: 'key',
        RETENTION_S3_SECRET_ACCESS_KEY: 'secret',
        RETENTION_S3_FORCE_PATH_STYLE: 'false',
      }),
    ).toEqual({
      enabled: true,
      every: 30000,
      maxLen: 100000,
      maxAgeMs: 604800000,
      deadLetterMaxLen: 1000,
      archive: {
        driver: 's3',
        bucket: 'events',
        prefix: 'eventrail/',
        region: 'eu-central-1',
        endpoint: 'http://minio:9000',
        forcePathStyle: false,
        credentials: { accessKeyId: 'key', secretAccessKey: 'secret' },
      },
    });
    expect(retentionOptionsFromEnv({})).toEqual({ enabled: false });
    // The mode picks which limit applies; without it, whichever is set.
    expect(
      retentionOptionsFromEnv({ RETENTION_STREAM_MODE: 'maxlen', RETENTION_STREAM_MAX_LEN: '5', RETENTION_STREAM_KEEP_MS: '9' }),
    ).toEqual({
      enabled: false,
      maxLen: 5,
    });
    expect(
      retentionOptionsFromEnv({ RETENTION_STREAM_KEEP_MS: '9', RETENTION_ARCHIVE_DIR: '/a', RETENTION_ARCHIVE_ENABLED: 'yes' }),
    ).toEqual({
      enabled: false,
      maxAgeMs: 9,
      archive: { driver: 'fs', dir: '/a' },
    });
    // What it returns passes the module's validation.
    expect(
      resolveModuleOptions({ retention: retentionOptionsFromEnv({ RETENTION_ENABLED: '1', RETENTION_STREAM_MAX_LEN: '10' }) }, {})
        .retention,
    ).toMatchObject({
      enabled: true,
      maxLen: 10,
    });
  });

  it.each<[string, Record<string, string>, string]>([
    ['a bad boolean', { RETENTION_ENABLED: 'maybe' }, 'option RETENTION_ENABLED: got "maybe"'],
    ['a bad number', { RETENTION_STREAM_MAX_LEN: '10k' }, 'option RETENTION_STREAM_MAX_LEN: got "10k"'],
    ['a bad mode', { RETENTION_STREAM_MODE: 'fifo' }, 'option RETENTION_STREAM_MODE'],
    ['a mode without its limit', { RETENTION_STREAM_MODE: 'minid' }, 'option RETENTION_STREAM_KEEP_MS'],
    ['fs without a dir', { RETENTION_ARCHIVE_ENABLED: 'true' }, 'option RETENTION_ARCHIVE_DIR'],
    ['s3 without a bucket', { RETENTION_ARCHIVE_DRIVER: 's3' }, 'option RETENTION_S3_BUCKET'],
    [
      'half credentials',
      { RETENTION_ARCHIVE_DRIVER: 's3', RETENTION_S3_BUCKET: 'b', RETENTION_S3_ACCESS_KEY_ID: 'k' },
      'RETENTION_S3_SECRET_ACCESS_KEY',
    ],
  ])('refuses %s, naming the variable', (_, env, message) => {
    expect(() => retentionOptionsFromEnv(env)).toThrow(InvalidOptionError);
    expect(() => retentionOptionsFromEnv(env)).toThrow(message);
  });
});

describe('trim point', () => {
  it('steps ids, including a sequence overflow', () => {
    expect(nextStreamId('5-3')).toBe('5-4');
    expect(nextStreamId('5-18446744073709551615')).toBe('6-0');
    expect(allowedMinId(null)).toBe('0-0');
    expect(allowedMinId('0-0')).toBe('0-0');
    expect(allowedMinId('7-2')).toBe('7-3');
    expect(minIdForAge(10_000, 3_000)).toBe('7000-0');
  });

  it('takes the larger of the policies, then caps it at the lowest live offset', () => {
    expect(requestedMinId([null, null])).toBeNull();
    expect(requestedMinId(['10-0', '9-5'])).toBe('10-0');
    expect(requestedMinId(['9-10', '9-9'])).toBe('9-10'); // numeric, not string, order
    expect(capMinId('10-0', [])).toEqual({ minId: '10-0', heldBackBy: [] });
    expect(
      capMinId('10-0', [
        { group: 'fast', committed: '12-0' },
        { group: 'slow', committed: '4-7' },
        { group: 'slower', committed: '3-0' },
      ]),
    ).toEqual({ minId: '3-1', heldBackBy: ['slow', 'slower'] });
    expect(capMinId('10-0', [{ group: 'new', committed: null }])).toEqual({ minId: null, heldBackBy: ['new'] });
    expect(capMinId(null, [{ group: 'a', committed: '1-0' }])).toEqual({ minId: null, heldBackBy: [] });
  });
});

describe('archive file', () => {
  it('names objects by partition and id range, and parses only such names', () => {
    const name = archiveName('app', 3, '1-0', '9-2');
    expect(name).toBe('app/p3/1-0_9-2.jsonl.gz');
    expect(parseArchiveName(name)).toEqual({ name, prefix: 'app', partition: 3, firstId: '1-0', lastId: '9-2' });
    expect(parseArchiveName('app/p3/1-0_9-2.jsonl')).toBeNull();
    expect(parseArchiveName('../p3/1-0_9-2.jsonl.gz')).toBeNull();
    expect(parseArchiveName('app/../p3/1-0_9-2.jsonl.gz')).toBeNull();
  });

  it('round-trips entries and names the first bad line', async () => {
    const body = await encodeArchive(1, [
      ['5-0', ['event', 'a', 'data', '{"x":1}']],
      ['5-1', ['event', 'b', 'data', '[]', 'to', 'billing']],
    ]);
    expect(await decodeArchive('n', body)).toEqual([
      { partition: 1, id: '5-0', fields: { event: 'a', data: '{"x":1}' } },
      { partition: 1, id: '5-1', fields: { event: 'b', data: '[]', to: 'billing' } },
    ]);
    await expect(decodeArchive('n', Buffer.from('plain'))).rejects.toThrow(ArchiveFormatError);
    const bad = gzipSync('{"partition":0,"id":"1-0","fields":{}}\n{"partition":0,"id":"x","fields":{}}\n');
    await expect(decodeArchive('n', bad)).rejects.toThrow('Archive "n" line 2 cannot be restored: "id" is not a stream id');
  });
});
