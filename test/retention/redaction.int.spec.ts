import { INestApplicationContext, Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailPublisher, EventrailRetention } from '../../lib';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';
import { freePort } from '../support/redis-server';

describe('retention messages never show an archive endpoint password', () => {
  let redis: Redis;
  let prefix: string;
  let app: INestApplicationContext | undefined;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('retr');
  });
  afterEach(async () => {
    jest.restoreAllMocks();
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('in the partition error and the log line of a failed archive', async () => {
    const secret = 'Ep0intSecretPw';
    const port = await freePort(); // nothing listens: every upload fails
    const lines: string[] = [];
    const record = (message: unknown): void => void lines.push(String(message));
    jest.spyOn(Logger.prototype, 'log').mockImplementation(record);
    jest.spyOn(Logger.prototype, 'warn').mockImplementation(record);
    jest.spyOn(Logger.prototype, 'error').mockImplementation(record);
    jest.spyOn(Logger.prototype, 'debug').mockImplementation(record);
    app = await createApp({
      prefix,
      retention: {
        enabled: false,
        maxLen: 0,
        archive: {
          driver: 's3',
          bucket: 'logs',
          endpoint: `http://ops:${secret}@127.0.0.1:${port}`,
          credentials: { accessKeyId: 'k', secretAccessKey: 's' },
        },
      },
    });
    await app.get(EventrailPublisher).publish('n', {});
    const [partition] = (await app.get(EventrailRetention).runOnce()).partitions;
    expect(partition).toMatchObject({ trimmed: 0, error: expect.stringContaining('archive to s3:http://ops:***@127.0.0.1') });
    expect(partition.error).not.toContain(secret);
    expect(lines.some((line) => line.includes('nothing trimmed'))).toBe(true);
    expect(lines.filter((line) => line.includes(secret))).toEqual([]);
  });
});
