import { DEFAULT_CONSUMER_OPTIONS, InvalidOptionError } from '../../lib';
import { resolveConsumerOptions, resolveModuleOptions } from '../../lib/module/eventrail.options';
import { nearestKey } from '../../lib/util/option-checks';

/** Every slip of one letter that still reads as `key`: a letter dropped, doubled, or swapped with the next. */
function misspellings(key: string): string[] {
  const out = new Set<string>();
  for (let i = 0; i < key.length; i++) {
    out.add(key.slice(0, i) + key.slice(i + 1));
    out.add(key.slice(0, i) + key[i] + key.slice(i));
    if (i + 1 < key.length && key[i] !== key[i + 1]) out.add(key.slice(0, i) + key[i + 1] + key[i] + key.slice(i + 2));
  }
  out.delete(key);
  return [...out].filter((slip) => slip.length > 0);
}

const VALUE = 'value-given-under-the-typo';

/** Each options object that refuses unknown keys: where the typo goes, and the keys it knows. */
const OBJECTS: Array<{ name: string; path: string; known: string[]; ignored?: string[]; resolve: (typo: string) => unknown }> = [
  {
    name: 'module options',
    path: '',
    known: [
      'redis',
      'prefix',
      'partitions',
      'consumer',
      'durability',
      'replication',
      'groups',
      'autoStart',
      'maxPayloadBytes',
      'dedupWindowMs',
      'startupTimeoutMs',
      'allowDegradedStart',
      'isGlobal',
      'metrics',
      'retention',
    ],
    resolve: (typo) => resolveModuleOptions({ [typo]: VALUE } as never, {}),
  },
  {
    name: 'replication',
    path: 'replication.',
    known: ['replicas', 'timeoutMs'],
    resolve: (typo) => resolveModuleOptions({ replication: { [typo]: VALUE } } as never, {}),
  },
  {
    name: 'redis.cluster',
    path: 'redis.cluster.',
    known: ['nodes', 'options'],
    resolve: (typo) => resolveModuleOptions({ redis: { cluster: { nodes: ['h:1'], [typo]: VALUE } } } as never, {}),
  },
  {
    name: 'module consumer options',
    path: 'consumer.',
    known: Object.keys(DEFAULT_CONSUMER_OPTIONS),
    resolve: (typo) => resolveModuleOptions({ consumer: { [typo]: VALUE } } as never, {}),
  },
  {
    name: 'group options',
    path: 'groups.mailer.',
    known: Object.keys(DEFAULT_CONSUMER_OPTIONS),
    resolve: (typo) => resolveModuleOptions({ groups: { mailer: { [typo]: VALUE } } } as never, {}),
  },
  {
    // What the explorer calls with the options of an @OnEvent decorator.
    name: '@OnEvent options',
    path: '@OnEvent on Mailer.send.',
    known: Object.keys(DEFAULT_CONSUMER_OPTIONS),
    ignored: ['group'],
    resolve: (typo) =>
      resolveConsumerOptions('@OnEvent on Mailer.send', { group: 'mailer', [typo]: VALUE } as never, DEFAULT_CONSUMER_OPTIONS),
  },
  {
    name: 'retention',
    path: 'retention.',
    known: ['enabled', 'every', 'maxLen', 'maxAgeMs', 'approximate', 'deadLetterMaxLen', 'staleGroupMs', 'archive', 'allowUnarchivedTrim'],
    resolve: (typo) => resolveModuleOptions({ retention: { enabled: false, [typo]: VALUE } } as never, {}),
  },
  {
    name: 'an fs archive',
    path: 'retention.archive.',
    known: ['driver', 'dir', 'maxEntriesPerObject'],
    resolve: (typo) =>
      resolveModuleOptions({ retention: { enabled: false, archive: { driver: 'fs', dir: '/a', [typo]: VALUE } } } as never, {}),
  },
  {
    name: 'an s3 archive',
    path: 'retention.archive.',
    known: ['driver', 'bucket', 'prefix', 'region', 'endpoint', 'credentials', 'forcePathStyle', 'maxEntriesPerObject'],
    resolve: (typo) =>
      resolveModuleOptions({ retention: { enabled: false, archive: { driver: 's3', bucket: 'logs', [typo]: VALUE } } } as never, {}),
  },
];

function thrown(run: () => unknown): Error {
  try {
    run();
  } catch (error) {
    return error as Error;
  }
  throw new Error('did not throw');
}

describe('unknown option keys', () => {
  it.each(OBJECTS.map((o) => [o.name, o] as const))(
    '%s: every one-letter slip of every key is refused, naming it and the key meant',
    (_, object) => {
      let checked = 0;
      for (const key of object.known) {
        for (const typo of misspellings(key)) {
          if (object.known.includes(typo) || object.ignored?.includes(typo)) continue;
          const error = thrown(() => object.resolve(typo));
          expect(error).toBeInstanceOf(InvalidOptionError);
          expect(error.message).toContain(`Invalid eventrail option ${object.path}${typo}: got an unknown option (did you mean ${key}?)`);
          expect(error.message).not.toContain(VALUE);
          checked++;
        }
      }
      expect(checked).toBeGreaterThan(object.known.length * 3);
    },
  );

  it('names the key asked for, in any case, and offers nothing when no key is near', () => {
    expect(() => resolveModuleOptions({ partitons: 4 } as never, {})).toThrow(
      'Invalid eventrail option partitons: got an unknown option (did you mean partitions?), expected one of the options redis, prefix, partitions,',
    );
    expect(() => resolveModuleOptions({ Partitions: 4 } as never, {})).toThrow('(did you mean partitions?)');
    expect(() => resolveModuleOptions({ concurrency: 4 } as never, {})).toThrow(
      'Invalid eventrail option concurrency: got an unknown option, expected one of the options redis,',
    );
    expect(nearestKey('batchsize', ['batchSize', 'concurrency'])).toBe('batchSize');
    expect(nearestKey('xyz', ['dir'])).toBeUndefined();
    expect(nearestKey('dri', ['dir', 'driver'])).toBe('dir');
  });
});
