import Redis from 'ioredis';
import { spawnTypeScript } from '../support/child-processes';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

describe('without @opentelemetry/api installed', () => {
  const redis = new Redis(testRedisUrl());
  const prefix = uniquePrefix('no-otel');
  afterAll(async () => {
    await deletePrefix(redis, prefix);
    await redis.quit();
  });

  it('the main entry does not load it, and publishing and handling work as before, with no headers added', async () => {
    const child = spawnTypeScript('test/tracing/without-opentelemetry.app.ts', {
      nodeArgs: ['-r', './test/tracing/block-opentelemetry.cjs'],
      env: { TEST_PREFIX: prefix },
    });
    const stderr: string[] = [];
    child.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
    const report = await new Promise<Record<string, unknown>>((resolve, reject) => {
      child.once('message', (message) => resolve(message as Record<string, unknown>));
      child.once('exit', (code) => reject(new Error(`the app exited (${code}) without reporting: ${stderr.join('')}`)));
    });
    expect(report.error).toBeUndefined();
    // Not even tried while the library loaded; tried once, on the first publish, and found missing.
    expect(report.requestedAtLoad).toBe(0);
    expect(report.requests).toEqual(['@opentelemetry/api']);
    expect(report.id).toBe((report.published as { id: string }).id);
    expect(report.headers).toEqual({});
  });
});
