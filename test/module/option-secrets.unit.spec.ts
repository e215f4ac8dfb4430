import { InvalidOptionError } from '../../lib';
import { resolveModuleOptions } from '../../lib/module/eventrail.options';
import { seededRandom as generator } from '../support/seeded-random';

const SECRET_KEYS = [
  'password',
  'PASSWORD',
  'Password',
  'sentinelPassword',
  'passphrase',
  'secretAccessKey',
  'SECRET_ACCESS_KEY',
  'accessKeyId',
  'AccessKeyID',
  'sessionToken',
  'token',
  'accessToken',
  'credentials',
  'auth',
  'Authorization',
  'apiKey',
  'key',
];

/** Ways a secret travels in a string. */
const IN_STRINGS: Array<(secret: string) => string> = [
  (s) => `redis://user:${s}@cache.internal:6379`,
  (s) => `rediss://:${s}@cache.internal:6380/2`,
  (s) => `redis://cache.internal:6379?password=${s}`,
  (s) => `redis://default:${s}@10.0.0.1:7000`,
  (s) => `redis://ops:${s}@h1:7000,h2:7001`,
  (s) => `memcache://app:${s}@cache:6379`,
  (s) => `app:${s}@cache:6379`,
  (s) => `redis:/app:${s}@cache:6379`,
  (s) => `http://minio:${s}@minio.local:9000`,
  (s) => `connect with redis://u:${s}@h:1 please`,
];

interface Case {
  seed: number;
  secret: string;
  options: object;
}

function makeCase(seed: number): Case {
  const random = generator(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)];
  const secret = `Zq${Math.floor(random() * 1e12).toString(36)}X${seed}`;

  // The secret under a secret-named key, or in a URL, or as a cluster node's password ...
  const carriers: Array<() => unknown> = [
    () => ({ [pick(SECRET_KEYS)]: secret }),
    () => pick(IN_STRINGS)(secret),
    () => ({ host: 'cache', port: 6379, password: secret }),
    () => ({ url: pick(IN_STRINGS)(secret), tls: { key: secret, cert: 'public' } }),
    () => [1, { nested: { [pick(SECRET_KEYS)]: { deeper: secret } } }],
  ];
  let value = pick(carriers)();
  // ... at some depth, in objects and arrays.
  for (let depth = Math.floor(random() * 4); depth > 0; depth--) {
    const inner = value;
    value = pick<() => unknown>([() => ({ a: inner }), () => [inner], () => ({ list: [0, inner, 'x'] }), () => ({ outer: { inner } })])();
  }

  // ... given to an option that refuses it, so the error shows it.
  const notArray = Array.isArray(value) ? { list: value } : value;
  const targets: Array<() => object> = [
    () => ({ partitions: value }),
    () => ({ autoStart: value }),
    () => ({ prefix: typeof value === 'string' ? value : { value } }),
    () => ({ durability: value }),
    () => ({ maxPayloadBytes: value }),
    () => ({ replication: { replicas: value } }),
    () => ({ consumer: { concurrency: value } }),
    () => ({ groups: { mailer: { batchSize: value } } }),
    () => ({ metrics: { onLag: value } }),
    () => ({ redis: { cluster: { nodes: notArray } } }),
    () => ({ redis: pick(IN_STRINGS.slice(5))(secret) }),
    () => ({ retention: { enabled: true, maxLen: value } }),
    () => ({ retention: { enabled: false, every: typeof value === 'string' ? { value } : value } }),
    () => ({ retention: { enabled: false, archive: { driver: 'fs', dir: typeof value === 'string' ? [value] : value } } }),
    // Valid credentials and endpoint, shown whole because no policy is set.
    () => ({
      retention: {
        enabled: true,
        archive: {
          driver: 's3',
          bucket: 'logs',
          endpoint: `http://minio:${secret}@minio.local:9000`,
          credentials: { accessKeyId: secret, secretAccessKey: secret, sessionToken: secret },
        },
      },
    }),
    // A misspelt key: its value is shown nowhere.
    () => ({ consumer: { passwrd: value } }),
    () => ({ retention: { enabled: false, archive: { driver: 's3', bucket: 'logs', credentails: value } } }),
    () => ({ groups: { [pick(IN_STRINGS)(secret)]: {} } }),
  ];
  return { seed, secret, options: pick(targets)() };
}

describe('option errors never show a secret', () => {
  it('for 2000 generated wrong configurations with secrets nested in objects, arrays and URLs', () => {
    let checked = 0;
    for (let seed = 1; seed <= 2000; seed++) {
      const { secret, options } = makeCase(seed);
      let error: unknown;
      try {
        resolveModuleOptions(options as never, {});
      } catch (caught) {
        error = caught;
      }
      const where = `seed ${seed}: ${JSON.stringify(options)}`;
      if (!(error instanceof InvalidOptionError)) throw new Error(`${where} did not throw InvalidOptionError: ${String(error)}`);
      // The message, the stack, and what a logger serializing the error's fields would print.
      for (const shown of [error.message, String(error.stack), JSON.stringify(error), JSON.stringify({ ...error })]) {
        if (shown.includes(secret)) throw new Error(`${where}: the secret appears in ${shown}`);
      }
      checked++;
    }
    expect(checked).toBe(2000);
  });

  it('still shows what is wrong around the secret', () => {
    expect(() => resolveModuleOptions({ partitions: { host: 'h', password: 'pw1', port: 1 } } as never, {})).toThrow(
      'Invalid eventrail option partitions: got {"host":"h","password":"***","port":1}, expected an integer from 1 to 1024',
    );
    expect(() => resolveModuleOptions({ redis: { cluster: { nodes: 'redis://ops:pw2@h:7000' } } } as never, {})).toThrow(
      'option redis.cluster.nodes: got "redis://ops:***@h:7000"',
    );
    expect(() => resolveModuleOptions({ autoStart: [{ auth: { user: 'u', pass: 'pw3' } }] } as never, {})).toThrow(
      'option autoStart: got [{"auth":"***"}]',
    );
    // Being absent or switched off is not a secret.
    expect(() => resolveModuleOptions({ autoStart: { password: null, auth: false } } as never, {})).toThrow(
      'got {"password":null,"auth":false}',
    );
    const error = new InvalidOptionError('x', { password: 'pw4' }, 'y');
    expect(error.value).toEqual({ password: 'pw4' }); // kept for code that inspects it, not enumerable
    expect(Object.keys(error)).not.toContain('value');
  });
});
