import { InvalidOptionError } from '../../lib';
import { CLOUD_EVENTS_SOURCE_OPTION_NAMES } from '../../lib/cloudevents/cloud-events-source.options';
import { KNOWN as INGRESS_OPTION_NAMES, resolveCloudEventsOptions } from '../../lib/cloudevents/cloud-events-ingress.options';
import { LOG_OPTION_NAMES } from '../../lib/config/log.options';
import {
  BATCH_OPTION_NAMES,
  CONSUMER_OPTION_NAMES,
  CONSUMERS_OPTION_NAMES,
  DEFAULT_CONSUMER_OPTIONS,
  resolveBatchOptions,
  resolveConsumerOptions,
} from '../../lib/consumer/consumer.options';
import { KNOWN as DASHBOARD_OPTION_NAMES, resolveDashboardOptions } from '../../lib/dashboard/dashboard.options';
import {
  CLIENT_OPTION_NAMES,
  resolveClientOptions,
  resolveServerOptions,
  SERVER_OPTION_NAMES,
} from '../../lib/microservices/transport.options';
import { MODULE_OPTION_NAMES, resolveModuleOptions } from '../../lib/module/eventrail.options';
import {
  INBOX_OPTION_NAMES,
  OPTION_NAMES as OUTBOX_OPTION_NAMES,
  RELAY_OPTION_NAMES,
  resolveOutboxOptions,
} from '../../lib/outbox/outbox.options';
import { PUBLISHER_OPTION_NAMES } from '../../lib/publisher/publisher.options';
import {
  CLUSTER_OPTION_NAMES,
  CONNECTION_OPTION_NAMES,
  REDIS_OPTION_NAMES,
  REPLICATION_OPTION_NAMES,
} from '../../lib/redis/connection.options';
import { FS_ARCHIVE_OPTION_NAMES, RETENTION_OPTION_NAMES, S3_ARCHIVE_OPTION_NAMES } from '../../lib/retention/retention.options';
import { TRACING_OPTION_NAMES } from '../../lib/tracing/tracing.options';
import { nearestKey } from '../../lib/config/option-checks';

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
const connector = { execute: () => 0, transaction: () => 0, query: () => 0, session: () => 0 };

/**
 * Each options object that refuses unknown keys: where the typo goes, and the keys it knows, read from the
 * list the code checks against, so a name added to a part is covered here without editing this file.
 */
const OBJECTS: Array<{ name: string; path: string; known: readonly string[]; ignored?: string[]; resolve: (typo: string) => unknown }> = [
  {
    name: 'module options',
    path: '',
    known: MODULE_OPTION_NAMES,
    resolve: (typo) => resolveModuleOptions({ [typo]: VALUE } as never, {}),
  },
  {
    name: 'replication',
    path: 'replication.',
    known: REPLICATION_OPTION_NAMES,
    resolve: (typo) => resolveModuleOptions({ replication: { [typo]: VALUE } } as never, {}),
  },
  {
    name: 'redis.cluster',
    path: 'redis.cluster.',
    known: CLUSTER_OPTION_NAMES,
    resolve: (typo) => resolveModuleOptions({ redis: { cluster: { nodes: ['h:1'], [typo]: VALUE } } } as never, {}),
  },
  {
    name: 'redis.sentinel',
    path: 'redis.sentinel.',
    known: REDIS_OPTION_NAMES,
    resolve: (typo) =>
      resolveModuleOptions({ redis: { sentinel: { sentinels: [{ host: 'h', port: 1 }], name: 'm', [typo]: VALUE } } } as never, {}),
  },
  {
    name: 'module consumer options',
    path: 'consumer.',
    known: CONSUMER_OPTION_NAMES,
    resolve: (typo) => resolveModuleOptions({ consumer: { [typo]: VALUE } } as never, {}),
  },
  {
    name: 'group options',
    path: 'groups.mailer.',
    known: CONSUMER_OPTION_NAMES,
    resolve: (typo) => resolveModuleOptions({ groups: { mailer: { [typo]: VALUE } } } as never, {}),
  },
  {
    // What the explorer calls with the options of an @OnEvent decorator.
    name: '@OnEvent options',
    path: '@OnEvent on Mailer.send.',
    known: CONSUMER_OPTION_NAMES,
    ignored: ['group'],
    resolve: (typo) =>
      resolveConsumerOptions('@OnEvent on Mailer.send', { group: 'mailer', [typo]: VALUE } as never, DEFAULT_CONSUMER_OPTIONS),
  },
  {
    // What the explorer calls with `batch` of an @OnEvent decorator.
    name: '@OnEvent batch',
    path: 'batch.',
    known: BATCH_OPTION_NAMES,
    resolve: (typo) => resolveBatchOptions('batch', { [typo]: VALUE }),
  },
  {
    name: 'retention',
    path: 'retention.',
    known: RETENTION_OPTION_NAMES,
    resolve: (typo) => resolveModuleOptions({ retention: { enabled: false, [typo]: VALUE } } as never, {}),
  },
  {
    name: 'an fs archive',
    path: 'retention.archive.',
    known: FS_ARCHIVE_OPTION_NAMES,
    resolve: (typo) =>
      resolveModuleOptions({ retention: { enabled: false, archive: { driver: 'fs', dir: '/a', [typo]: VALUE } } } as never, {}),
  },
  {
    name: 'an s3 archive',
    path: 'retention.archive.',
    known: S3_ARCHIVE_OPTION_NAMES,
    resolve: (typo) =>
      resolveModuleOptions({ retention: { enabled: false, archive: { driver: 's3', bucket: 'logs', [typo]: VALUE } } } as never, {}),
  },
  {
    name: 'tracing',
    path: 'tracing.',
    known: TRACING_OPTION_NAMES,
    resolve: (typo) => resolveModuleOptions({ tracing: { [typo]: VALUE } } as never, {}),
  },
  {
    name: 'cloudEvents',
    path: 'cloudEvents.',
    known: CLOUD_EVENTS_SOURCE_OPTION_NAMES,
    resolve: (typo) => resolveModuleOptions({ cloudEvents: { [typo]: VALUE } } as never, {}),
  },
  {
    name: 'dashboard',
    path: 'dashboard.',
    known: DASHBOARD_OPTION_NAMES,
    resolve: (typo) => resolveDashboardOptions({ [typo]: VALUE } as never, {}),
  },
  {
    name: 'CloudEvents ingress',
    path: 'cloudEventsIngress.',
    known: INGRESS_OPTION_NAMES,
    resolve: (typo) => resolveCloudEventsOptions({ [typo]: VALUE } as never, {}),
  },
  {
    name: 'outbox',
    path: 'outbox.',
    known: OUTBOX_OPTION_NAMES,
    resolve: (typo) => resolveOutboxOptions({ connector, [typo]: VALUE } as never),
  },
  {
    name: 'outbox relay',
    path: 'outbox.relay.',
    known: RELAY_OPTION_NAMES,
    resolve: (typo) => resolveOutboxOptions({ connector, relay: { [typo]: VALUE } } as never),
  },
  {
    name: 'inbox',
    path: 'outbox.inbox.',
    known: INBOX_OPTION_NAMES,
    resolve: (typo) => resolveOutboxOptions({ connector, inbox: { [typo]: VALUE } } as never),
  },
  {
    name: 'microservices server',
    path: '',
    known: SERVER_OPTION_NAMES,
    resolve: (typo) => resolveServerOptions({ group: 'mailer', [typo]: VALUE } as never),
  },
  {
    name: 'microservices client',
    path: '',
    known: CLIENT_OPTION_NAMES,
    resolve: (typo) => resolveClientOptions({ [typo]: VALUE } as never),
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
          expect(error.message).toContain(`Invalid eventrail option ${object.path}${typo}: got an unknown option (did you mean `);
          const suggested = /\(did you mean (\w+)\?\)/.exec(error.message)?.[1];
          // A slip can land as near another key (`uath`: auth swapped, path changed); then that key, as near, is a fair answer.
          if (suggested !== key) {
            expect(object.known).toContain(suggested);
            expect(nearestKey(typo, [suggested ?? '', key])).toBe(suggested);
          }
          expect(error.message).not.toContain(VALUE);
          checked++;
        }
      }
      expect(checked).toBeGreaterThan(object.known.length * 3);
    },
  );

  it('the module accepts exactly the keys of its parts and its own, each once', () => {
    const parts = [...LOG_OPTION_NAMES, ...CONNECTION_OPTION_NAMES, ...PUBLISHER_OPTION_NAMES, ...CONSUMERS_OPTION_NAMES];
    const own = ['isGlobal', 'metrics', 'retention', 'tracing', 'cloudEvents'];
    expect(new Set(MODULE_OPTION_NAMES).size).toBe(MODULE_OPTION_NAMES.length);
    expect([...MODULE_OPTION_NAMES].sort()).toEqual([...parts, ...own].sort());
    expect(MODULE_OPTION_NAMES).toHaveLength(19);
  });

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
