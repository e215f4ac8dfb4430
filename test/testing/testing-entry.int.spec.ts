import Redis from 'ioredis';
import { createTestPrefix, deletePrefix, freePort, startRedisServer, uniquePrefix } from 'nestjs-eventrail/testing';
import { InvalidOptionError } from '../../lib';
import { testRedisUrl } from '../support/helpers';

describe('nestjs-eventrail/testing', () => {
  it('startRedisServer() starts a throwaway redis-server on a free port, and stop() ends it', async () => {
    const server = await startRedisServer();
    const client = new Redis(server.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => undefined);
    try {
      expect(server.url).toBe(`redis://127.0.0.1:${server.port}`);
      expect(await client.ping()).toBe('PONG');
      // No persistence: a test server writes nothing to disk.
      expect(await client.config('GET', 'appendonly')).toEqual(['appendonly', 'no']);
    } finally {
      client.disconnect();
    }
    await server.stop();
    expect(isRunning(server.pid)).toBe(false);
    await server.stop(); // stopping twice is harmless
  });

  it('takes a port and extra arguments, and fails with what redis-server printed when it cannot start', async () => {
    const port = await freePort();
    const server = await startRedisServer({ port, args: ['--maxmemory-policy', 'noeviction'] });
    const client = new Redis(server.url);
    try {
      expect(server.port).toBe(port);
      expect(await client.config('GET', 'maxmemory-policy')).toEqual(['maxmemory-policy', 'noeviction']);
      // The port is taken: the server already there answers PING, but it is not the one started.
      await expect(startRedisServer({ port })).rejects.toThrow(new RegExp(`redis-server on port ${port} exited at startup`));
      expect(await client.ping()).toBe('PONG');
    } finally {
      client.disconnect();
      await server.stop();
    }
    await expect(startRedisServer({ args: ['--no-such-option', 'x'] })).rejects.toThrow(/exited at startup/);
  });

  it('refuses bad options with InvalidOptionError', async () => {
    await expect(startRedisServer({ prot: 1 } as never)).rejects.toThrow(
      /startRedisServer\.prot: got an unknown option \(did you mean port\?\)/,
    );
    await expect(startRedisServer({ port: 70000 })).rejects.toThrow(InvalidOptionError);
    await expect(startRedisServer({ args: '--appendonly yes' as never })).rejects.toThrow(/startRedisServer\.args.*an array of strings/);
    expect(() => createTestPrefix(testRedisUrl(), 'a:b')).toThrow(InvalidOptionError);
    expect(() => uniquePrefix('{tag}')).toThrow(InvalidOptionError);
    expect(() => createTestPrefix(undefined as never)).toThrow(/createTestPrefix redisUrl/);
  });

  it('createTestPrefix() gives a fresh prefix and deletes only the keys under it', async () => {
    const redis = new Redis(testRedisUrl());
    const mine = createTestPrefix(testRedisUrl(), 'recipe');
    const other = uniquePrefix('other');
    try {
      expect(mine.prefix).toMatch(/^recipe-[0-9a-f]{10}$/);
      expect(createTestPrefix(testRedisUrl()).prefix).not.toBe(createTestPrefix(testRedisUrl()).prefix);
      await redis.set(`${mine.prefix}:a`, '1');
      await redis.xadd(`{${mine.prefix}:0}:log`, '*', 'event', 'e', 'data', '1');
      await redis.set(`${other}:a`, '1');
      await redis.set(`${mine.prefix}-lookalike:a`, '1');
      expect(await mine.delete()).toBe(2);
      expect(await redis.exists(`${mine.prefix}:a`, `{${mine.prefix}:0}:log`)).toBe(0);
      expect(await redis.exists(`${other}:a`, `${mine.prefix}-lookalike:a`)).toBe(2);
      expect(await mine.delete()).toBe(0);
    } finally {
      await deletePrefix(redis, other);
      await deletePrefix(redis, `${mine.prefix}-lookalike`);
      redis.disconnect();
    }
  });
});

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
