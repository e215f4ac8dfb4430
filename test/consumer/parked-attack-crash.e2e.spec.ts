/**
 * A worker killed (SIGKILL, by pid) while it redelivers a parked head: the next owner counts the
 * redelivery as a delivery, redelivers the head, and the key's later messages follow it in order.
 * The same file is the worker process (PARKED_ATTACK_CHILD=1): its handler fails while the key is in
 * `<prefix>:test:down`, waits while `<prefix>:test:hold` exists (or its message is in `<prefix>:test:hold-names`),
 * and records calls, the calls it holds and successes in Redis so the record survives the kill.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import type { ChildProcess } from 'node:child_process';
import { EventrailAdmin, EventrailConsumers, EventrailMessage, EventrailModule, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { killQuietly, spawnTypeScript } from '../support/child-processes';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { key: string; n: number };
const GROUP = 'crash';

async function child(): Promise<void> {
  const prefix = process.env.ATTACK_PREFIX!;
  const url = process.env.ATTACK_REDIS_URL!;
  const records = new Redis(url);

  @Injectable()
  class Handler {
    @OnEvent('account.changed', {
      group: GROUP,
      ordering: 'key',
      // Not shorter: a worker stalled past its lease on a loaded host takes its partition back and counts
      // the redelivery still running in it as a crash (c), so a head with maxDeliveries 2 was dead-lettered
      // after one kill (CI, Node 22 lane).
      lockTtlMs: 2_500,
      heartbeatTtlMs: 2_500,
      maxRetries: 0,
      maxDeliveries: Number(process.env.ATTACK_MAX_DELIVERIES ?? 3),
      redelivery: { delayMs: 100, factor: 2, maxDelayMs: 200, maxAgeMs: 600_000 },
    })
    async handle(message: EventrailMessage<Data>): Promise<void> {
      const name = `${message.data.key}${message.data.n}`;
      await records.rpush(`${prefix}:test:calls`, name);
      const held = async () =>
        (await records.exists(`${prefix}:test:hold`)) === 1 || (await records.sismember(`${prefix}:test:hold-names`, name)) === 1;
      if (await held()) {
        // Recorded once the call is sure to hang: a call that saw no hold may still fail or succeed.
        await records.rpush(`${prefix}:test:holding`, name);
        while (await held()) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      if ((await records.sismember(`${prefix}:test:down`, message.data.key)) === 1) throw new Error(`${message.data.key} is down`);
      await records.rpush(`${prefix}:test:handled`, name);
    }
  }

  @Module({ imports: [EventrailModule.forRoot({ redis: url, prefix })], providers: [Handler] })
  class WorkerModule {}

  const app = await NestFactory.createApplicationContext(WorkerModule, { logger: ['warn', 'error'] });
  await app.get(EventrailConsumers).whenRunning();
  process.on('disconnect', () => process.exit(1));
  process.send?.({ type: 'ready' });
}

if (process.env.PARKED_ATTACK_CHILD === '1') {
  child().catch((error: unknown) => {
    console.error('parked-attack worker failed to start:', error);
    process.exit(1);
  });
} else {
  describe('parked keys under attack: a worker killed during a redelivery', () => {
    let redis: Redis;
    let prefix: string;
    let keys: EventrailKeys;
    let children: ChildProcess[] = [];
    let publisherApp: Awaited<ReturnType<typeof createApp>> | undefined;

    const startWorker = async (maxDeliveries: number): Promise<ChildProcess> => {
      const worker = spawnTypeScript('test/consumer/parked-attack-crash.e2e.spec.ts', {
        env: {
          PARKED_ATTACK_CHILD: '1',
          ATTACK_PREFIX: prefix,
          ATTACK_REDIS_URL: testRedisUrl(),
          ATTACK_MAX_DELIVERIES: String(maxDeliveries),
        },
      });
      children.push(worker);
      const output: string[] = [];
      worker.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
      await new Promise<void>((resolve, reject) => {
        worker.once('message', () => resolve());
        worker.once('exit', (code, signal) => reject(new Error(`worker exited before ready (${code ?? signal}): ${output.join('')}`)));
      });
      return worker;
    };
    const kill = async (worker: ChildProcess): Promise<void> => {
      const exited = new Promise((resolve) => worker.once('exit', resolve));
      killQuietly(worker.pid, 'SIGKILL');
      await exited;
    };
    const publish = (names: string[]) =>
      publisherApp!
        .get(EventrailPublisher)
        .publishMany(names.map((name) => ({ event: 'account.changed', data: { key: name[0], n: Number(name.slice(1)) }, key: name[0] })));
    const handled = () => redis.lrange(`${prefix}:test:handled`, 0, -1);
    const calls = () => redis.lrange(`${prefix}:test:calls`, 0, -1);
    const holding = () => redis.lrange(`${prefix}:test:holding`, 0, -1);
    const parkedLine = async (): Promise<{ ids: string[]; c: number } | undefined> => {
      const value = await redis.hget(keys.recovery(GROUP, 0), 'park:k:A');
      return value ? (JSON.parse(value) as { ids: string[]; c: number }) : undefined;
    };
    /** What the workers did and what Redis holds, for a failure's message. */
    const state = async (): Promise<string> =>
      JSON.stringify({
        calls: await calls(),
        holding: await holding(),
        handled: await handled(),
        parked: await redis.hget(keys.recovery(GROUP, 0), 'park:k:A'),
        lease: await redis.get(keys.lease(GROUP, 0)).catch((error: Error) => error.message),
        deadLetters: await publisherApp!.get(EventrailAdmin).deadLetterCount(GROUP),
      });
    /**
     * Waits for `worker` to hang in a redelivery of A's head, held by `<prefix>:test:hold`, and kills it there.
     * The hold must be set before that redelivery can start (a redelivery that starts first may be handled
     * and never run again), and `holdsBefore` counted while no worker can enter it: a worker that is ready
     * may already be in the hold by the time the test reads anything.
     */
    const killInHeldRedelivery = async (worker: ChildProcess, holdsBefore: number): Promise<void> => {
      await waitFor(
        async () => (await holding()).slice(holdsBefore).includes('A1'),
        async () => `a redelivery of A1 running; ${await state()}`,
      );
      await waitFor(
        async () => (await redis.hget(keys.recovery(GROUP, 0), 'park:k:A'))?.includes('"r":1'),
        'the running redelivery stored',
      );
      await kill(worker);
    };

    beforeAll(() => {
      redis = new Redis(testRedisUrl());
    });
    beforeEach(async () => {
      prefix = uniquePrefix('parked-attack-crash');
      keys = new EventrailKeys(prefix, 1);
      publisherApp = await createApp({ prefix });
    });
    afterEach(async () => {
      for (const worker of children) killQuietly(worker.pid, 'SIGKILL');
      children = [];
      await publisherApp?.close();
      await deletePrefix(redis, prefix);
    });
    afterAll(() => redis.disconnect());

    it('the next owner redelivers the head and the later messages of its key in order', async () => {
      const first = await startWorker(3);
      await redis.sadd(`${prefix}:test:down`, 'A');
      await publish(['A1', 'B1', 'A2']);
      await waitFor(async () => (await handled()).includes('B1') && (await parkedLine())?.ids.length === 2, 'A1, A2 parked; B1 handled');
      // Held before A comes back: A1's next redelivery hangs instead of being handled before the hold.
      await redis.set(`${prefix}:test:hold`, '1');
      await redis.srem(`${prefix}:test:down`, 'A');
      await killInHeldRedelivery(first, 0);
      await redis.del(`${prefix}:test:hold`);

      await startWorker(3);
      await publish(['A3', 'B2']);
      await waitFor(async () => (await handled()).filter((n) => n.startsWith('A')).length === 3, 'A handled', 30_000);
      expect((await handled()).filter((n) => n.startsWith('A'))).toEqual(['A1', 'A2', 'A3']);
      await waitFor(async () => (await parkedLine()) === undefined, 'the line released');
      expect(await publisherApp!.get(EventrailAdmin).deadLetterCount(GROUP)).toBe(0);
    }, 60_000);

    it('with maxDeliveries 2, two kills during redeliveries dead-letter the head (max-deliveries) and the next message goes on', async () => {
      let worker = await startWorker(2);
      await redis.sadd(`${prefix}:test:down`, 'A');
      await publish(['A1', 'B1', 'A2']);
      await waitFor(async () => (await handled()).includes('B1') && (await parkedLine())?.ids.length === 2, 'A1, A2 parked; B1 handled');
      await redis.set(`${prefix}:test:hold`, '1');
      await redis.srem(`${prefix}:test:down`, 'A');
      await killInHeldRedelivery(worker, 0);
      // The hold stays: the next owner may redeliver A1 as soon as it is ready, and must hang in it too.
      const holds = (await holding()).length;
      worker = await startWorker(2);
      await killInHeldRedelivery(worker, holds);
      await redis.del(`${prefix}:test:hold`);
      await startWorker(2);
      const admin = publisherApp!.get(EventrailAdmin);
      await waitFor(async () => (await handled()).includes('A2'), 'A2 handled', 30_000);
      const letters = await admin.deadLetters(GROUP);
      expect(letters.map((l) => [l.key, (l.data as Data).n, l.reason])).toEqual([['A', 1, 'max-deliveries']]);
      expect((await handled()).filter((n) => n.startsWith('A'))).toEqual(['A2']);
    }, 60_000);

    // A released line drains a batch of its messages between two writes of it, so a kill inside the batch
    // is counted on the batch's first message; the next owner then goes one message at a time, so the
    // message that kills workers is the one dead-lettered, not the batch's first (handled again instead).
    it('a message that kills its workers deep in a draining line is the one dead-lettered; the others are handled in order', async () => {
      let worker = await startWorker(2);
      await redis.sadd(`${prefix}:test:down`, 'A');
      const names = Array.from({ length: 8 }, (_, i) => `A${i + 1}`);
      await publish([...names, 'B1']);
      await waitFor(async () => (await handled()).includes('B1') && (await parkedLine())?.ids.length === 8, 'A1-A8 parked; B1 handled');
      await redis.sadd(`${prefix}:test:hold-names`, 'A5');
      const admin = publisherApp!.get(EventrailAdmin);
      const callsOfA5 = async () => (await calls()).filter((n) => n === 'A5').length;
      // Counted while no call of A5 can start (A is down here, and later no worker runs): a worker that is
      // ready may reach A5 before the test reads anything, and A5 then hangs without being called again.
      let before = await callsOfA5();
      await redis.srem(`${prefix}:test:down`, 'A');
      // Each round: A5 starts and hangs (the kill stands for a crash), or the new owner dead-letters it.
      for (let kills = 0; ; kills++) {
        await waitFor(async () => (await callsOfA5()) > before || (await admin.deadLetterCount(GROUP)) > 0, 'A5 called or dead-lettered');
        if ((await admin.deadLetterCount(GROUP)) > 0) break;
        // maxDeliveries 2, plus the kill counted on the batch's first message.
        expect(kills).toBeLessThan(3);
        await waitFor(async () => (await redis.hget(keys.recovery(GROUP, 0), 'park:k:A'))?.includes('"r":1'), 'the running batch stored');
        await kill(worker);
        before = await callsOfA5();
        worker = await startWorker(2);
      }
      await waitFor(async () => (await handled()).includes('A8'), 'A8 handled', 30_000);
      const letters = await admin.deadLetters(GROUP);
      expect(letters.map((l) => [l.key, (l.data as Data).n, l.reason])).toEqual([['A', 5, 'max-deliveries']]);
      // At least once: messages of the killed batch may be handled again, but first in order.
      expect([...new Set((await handled()).filter((n) => n.startsWith('A')))]).toEqual(['A1', 'A2', 'A3', 'A4', 'A6', 'A7', 'A8']);
      expect(await callsOfA5()).toBeLessThanOrEqual(3);
    }, 90_000);
  });
}
