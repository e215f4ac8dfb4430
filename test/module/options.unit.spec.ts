import { DEFAULT_CONSUMER_OPTIONS, InvalidOptionError } from '../../lib';
import { resolveConsumerOptions } from '../../lib/consumer/consumer.options';
import { resolveModuleOptions } from '../../lib/module/eventrail.options';

describe('resolveModuleOptions', () => {
  it('applies defaults and environment fallbacks', () => {
    const resolved = resolveModuleOptions({}, { EVENTRAIL_REDIS_URL: 'redis://r:1', EVENTRAIL_PREFIX: 'app' });
    expect(resolved).toMatchObject({ redis: 'redis://r:1', prefix: 'app', partitions: 1, autoStart: true, maxPayloadBytes: 1048576 });
    expect(resolved.consumer).toEqual(DEFAULT_CONSUMER_OPTIONS);
    expect(resolveModuleOptions({}, {}).redis).toBe('redis://localhost:6379');
    expect(resolveModuleOptions({ prefix: 'mine' }, { EVENTRAIL_PREFIX: 'env' }).prefix).toBe('mine');
  });

  it.each<[string, object, string]>([
    ['partitions 0', { partitions: 0 }, 'Invalid eventrail option partitions: got 0, expected an integer from 1 to 1024'],
    ['partitions 1.5', { partitions: 1.5 }, 'option partitions'],
    ['a prefix with a space', { prefix: 'a b' }, 'option prefix: got "a b"'],
    ['a prefix with braces', { prefix: '{x}' }, 'option prefix'],
    ['a non-URL string', { redis: 'localhost:6379' }, 'option redis: got "localhost:6379", expected a URL starting with redis://'],
    [
      'a wrong scheme, without echoing the password',
      { redis: 'memcache://app:s3c@ret@h:6379' },
      'option redis: got "memcache://***@h:6379"',
    ],
    ['no scheme, without echoing the password', { redis: 'app:s3cret@h:6379' }, 'option redis: got "app:***@h:6379"'],
    ['a mistyped scheme, without echoing the password', { redis: 'redis:/app:s3cret@h:6379' }, 'option redis: got "redis:/***@h:6379"'],
    ['concurrency 0', { consumer: { concurrency: 0 } }, 'option consumer.concurrency: got 0'],
    ['an unknown consumer option', { consumer: { concurency: 2 } }, 'option consumer.concurency'],
    ['a bad group name', { groups: { 'bad name': {} } }, 'option groups.bad name'],
    ['a bad group option', { groups: { mailer: { lockTtlMs: 10 } } }, 'option groups.mailer.lockTtlMs: got 10'],
    ['a bad initial offset mode', { consumer: { initialOffset: { mode: 'latest' } } }, 'option consumer.initialOffset.mode: got "latest"'],
    ['a bad initial offset id', { consumer: { initialOffset: { mode: 'fromId', id: 'abc' } } }, 'option consumer.initialOffset.id'],
    [
      'an invalid date',
      { consumer: { initialOffset: { mode: 'fromTime', time: new Date('nope') } } },
      'option consumer.initialOffset.time',
    ],
    ['autoStart as a string', { autoStart: 'yes' }, 'option autoStart: got "yes", expected true or false'],
  ])('refuses %s, naming the option', (_, options, message) => {
    expect(() => resolveModuleOptions(options as never, {})).toThrow(InvalidOptionError);
    expect(() => resolveModuleOptions(options as never, {})).toThrow(message);
  });

  it('layers group overrides over module-wide consumer options', () => {
    const base = resolveModuleOptions({ consumer: { batchSize: 50 } }, {}).consumer;
    const group = resolveConsumerOptions('groups.mailer', { concurrency: 8 }, base);
    expect(group).toMatchObject({ batchSize: 50, concurrency: 8, lockTtlMs: 30000 });
  });
});
