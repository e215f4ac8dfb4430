import Redis from 'ioredis';
import type { ChildProcess } from 'node:child_process';
import type { INestApplicationContext } from '@nestjs/common';
import { EventrailPublisher } from '../../lib';
import { redisTimeToMs } from '../../lib/consumer/coordination/membership';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { killQuietly, spawnTypeScript } from '../support/child-processes';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

jest.setTimeout(180_000);

const GROUP = 'payments';
const TEN_MINUTES = 600_000;

/**
 * Done-marks and first-failure times are written on Redis's clock; a worker
 * on a host whose clock is off must still read them right. Each worker here
 * is a process of its own with its clock moved (Date.now and new Date).
 */
describe('workers on hosts with skewed clocks', () => {
  const redis = new Redis(testRedisUrl());
  const children: ChildProcess[] = [];
  let prefix: string;
  let keys: EventrailKeys;
  let app: INestApplicationContext;
  let publisher: EventrailPublisher;

  beforeEach(async () => {
    prefix = uniquePrefix('skew');
    keys = new EventrailKeys(prefix, 1);
    app = await createApp({ prefix });
    publisher = app.get(EventrailPublisher);
  });

  afterEach(async () => {
    await Promise.all(children.splice(0).map((child) => stop(child)));
    await app.close();
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.quit());

  async function spawnWorker(skewMs: number, consumer: Record<string, unknown>): Promise<ChildProcess> {
    const output: string[] = [];
    const child = spawnTypeScript('test/consumer/support/skewed-worker.ts', {
      env: {
        SKEWED_PREFIX: prefix,
        SKEWED_REDIS_URL: testRedisUrl(),
        SKEWED_GROUP: GROUP,
        SKEWED_CLOCK_MS: String(skewMs),
        SKEWED_CONSUMER: JSON.stringify(consumer),
      },
    });
    children.push(child);
    child.stdout?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', (code) => reject(new Error(`worker exited before ready (${code}): ${output.join('')}`)));
    });
    return child;
  }

  async function stop(child: ChildProcess): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    killQuietly(child.pid, 'SIGKILL');
    await exited;
  }

  const handled = (): Promise<string[]> => redis.lrange(`${prefix}:test:handled`, 0, -1);

  it.each([
    ['ten minutes ahead', TEN_MINUTES],
    ['ten minutes behind', -TEN_MINUTES],
  ])('a worker %s keeps a one-minute done-mark for its minute: a second entry with the same id is not handled', async (_, skew) => {
    await spawnWorker(skew, { enableIdempotency: true, idempotencyTtlMs: 60_000 });
    await publisher.publish('pay.ok', { n: 1 }, { id: 'pay-1' });
    await waitFor(async () => (await handled()).length === 1, 'pay-1 handled');
    // No producer dedup: the same id is appended again, and only consumer idempotency stops it.
    await publisher.publish('pay.ok', { n: 1 }, { id: 'pay-1' });
    await publisher.publish('pay.ok', { n: 2 }, { id: 'pay-2' });
    await waitFor(async () => (await handled()).includes('pay-2'), 'pay-2 handled');
    expect(await handled()).toEqual(['pay-1', 'pay-2']);
  });

  it('a first failure on a host ten minutes behind is stored on Redis’s clock: the next owner gives the message its whole maxRetryAgeMs', async () => {
    const consumer = {
      ordering: 'partition',
      maxRetryAgeMs: 120_000,
      retryBackoffMs: 100,
      retryBackoffMaxMs: 200,
      lockTtlMs: 1_500,
      heartbeatTtlMs: 1_500,
    };
    const behind = await spawnWorker(-TEN_MINUTES, consumer);
    const { offset } = await publisher.publish('pay.failing', {});
    const recovery = keys.recovery(GROUP, 0);
    await waitFor(async () => (await redis.hget(recovery, 'failingAt')) === offset, 'the first failure remembered');
    const since = Number(await redis.hget(recovery, 'failingSince'));
    expect(Math.abs(redisTimeToMs(await redis.time()) - since)).toBeLessThan(30_000);

    await stop(behind);
    const next = await spawnWorker(0, consumer);
    const attemptsOfNext = async (): Promise<number> =>
      (await redis.lrange(`${prefix}:test:attempts`, 0, -1)).filter((a) => a.startsWith(`${next.pid}:`)).length;
    await waitFor(async () => (await attemptsOfNext()) >= 3, 'the next owner retried it');
    // Well within its two minutes: still retried, not dead-lettered.
    expect(await redis.exists(keys.deadLetters(GROUP))).toBe(0);
    expect(await redis.hget(recovery, 'failingSince')).toBe(String(since));
  });
});
