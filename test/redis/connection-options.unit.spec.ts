import { InvalidOptionError } from '../../lib';
import { resolveModuleOptions } from '../../lib/module/eventrail.options';
import { normalizeRedisUrl } from '../../lib/redis/redis-url';
import { parseClusterSeeds } from '../../lib/cli/runtime/cluster-seeds.parser';
import { permanentConnectionFailure } from '../../lib/redis/connection-failure';
import { RedisTlsError } from '../../lib/errors/redis-tls.error';
import { RedisUnavailableError } from '../../lib/errors/redis-unavailable.error';

describe('Valkey URL aliases', () => {
  it.each([
    ['valkey://cache:6379', 'redis://cache:6379'],
    ['valkeys://u:p@cache:6380/2', 'rediss://u:p@cache:6380/2'],
    ['VALKEYS://cache', 'rediss://cache'],
    ['redis://cache', 'redis://cache'],
    ['rediss://cache', 'rediss://cache'],
  ])('%s means %s', (given, meant) => {
    expect(normalizeRedisUrl(given)).toBe(meant);
    expect(resolveModuleOptions({ redis: given }, {}).redis).toBe(meant);
  });

  it('applies to EVENTRAIL_REDIS_URL and to cluster seeds', () => {
    expect(resolveModuleOptions({}, { EVENTRAIL_REDIS_URL: 'valkeys://h:1' }).redis).toBe('rediss://h:1');
    const seeds = parseClusterSeeds('valkeys://:pw@h1:7000,valkeys://h2:7001');
    expect(seeds.nodes).toEqual([
      { host: 'h1', port: 7000 },
      { host: 'h2', port: 7001 },
    ]);
    expect(seeds.redisOptions).toEqual({ password: 'pw', tls: {} });
  });
});

describe('redis: { sentinel }', () => {
  const sentinels = [{ host: '127.0.0.1', port: 26379 }];

  it('accepts the sentinels, the name and ioredis options', () => {
    const redis = { sentinel: { sentinels, name: 'mymaster', password: 'x', sentinelPassword: 'y', tls: {} } };
    expect(resolveModuleOptions({ redis }, {}).redis).toBe(redis);
  });

  it.each<[string, object, string]>([
    ['no sentinels', { name: 'm' }, 'option redis.sentinel.sentinels: got undefined, expected a non-empty array of { host, port }'],
    ['an empty list', { sentinels: [], name: 'm' }, 'option redis.sentinel.sentinels'],
    ['a port out of range', { sentinels: [{ host: 'h', port: 0 }], name: 'm' }, 'option redis.sentinel.sentinels[0].port: got 0'],
    ['a missing host', { sentinels: [{ port: 26379 }], name: 'm' }, 'option redis.sentinel.sentinels[0].host'],
    ['no name', { sentinels }, 'option redis.sentinel.name: got undefined, expected the name of the primary'],
    ['a misspelt option', { sentinels, name: 'm', sentinelPasword: 'p' }, 'did you mean sentinelPassword?'],
  ])('refuses %s, naming the option', (_, sentinel, message) => {
    expect(() => resolveModuleOptions({ redis: { sentinel } as never }, {})).toThrow(InvalidOptionError);
    expect(() => resolveModuleOptions({ redis: { sentinel } as never }, {})).toThrow(message);
  });

  it('does not show the value of a misspelt option, which may be a password', () => {
    expect(() => resolveModuleOptions({ redis: { sentinel: { sentinels, name: 'm', sentinelPasword: 'hunter2' } } as never }, {})).toThrow(
      /^(?!.*hunter2)/s,
    );
  });
});

describe('permanentConnectionFailure', () => {
  const failure = (code: string, message = 'boom'): Error => Object.assign(new Error(message), { code });

  it.each(['SELF_SIGNED_CERT_IN_CHAIN', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'ERR_TLS_CERT_ALTNAME_INVALID', 'ERR_SSL_WRONG_VERSION_NUMBER'])(
    'treats %s as no retry will cure it',
    (code) => {
      const error = permanentConnectionFailure(failure(code), 'h:6380');
      expect(error).toBeInstanceOf(RedisTlsError);
      expect(error).toBeInstanceOf(RedisUnavailableError);
      expect(error?.message).toContain(`TLS handshake with h:6380 failed (${code})`);
      expect(error?.code).toBe(code);
    },
  );

  it('looks through a cluster client to the node error', () => {
    const clusterError = Object.assign(new Error('Failed to refresh slots cache.'), {
      lastNodeError: failure('SELF_SIGNED_CERT_IN_CHAIN'),
    });
    expect(permanentConnectionFailure(clusterError, 'seeds')).toBeInstanceOf(RedisTlsError);
  });

  it.each(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT'])('leaves %s to reconnecting', (code) => {
    expect(permanentConnectionFailure(failure(code), 'h:1')).toBeUndefined();
  });
});
