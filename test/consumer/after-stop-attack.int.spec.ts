import { Injectable, INestApplicationContext, Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { PartitionLease } from '../../lib/consumer/coordination/lease';
import type { PartitionWorker } from '../../lib/consumer/pipeline/partition-worker';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { partitionWorker } from './support/internals';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

/**
 * Work a partition worker does after it was told to stop (a hand-back's drain, a shutdown's halt):
 * windows where an await of the worker, or of what it started, settles after the stop and the code
 * goes on as if nothing happened.
 */

const calls: number[] = [];
/** Set by a test: the handler's call for message 2 waits on it. */
const gate: { hold?: Promise<void> } = {};

@Injectable()
class Jobs {
  @OnEvent('job.run', { group: 'jobs', ordering: 'unordered', concurrency: 2 })
  async run(message: EventrailMessage<{ n: number }>): Promise<void> {
    calls.push(message.data.n);
    if (message.data.n === 2 && gate.hold) await gate.hold;
  }
}

@Injectable()
class Keyed {
  @OnEvent('keyed.run', 'keyed')
  run(): void {}
}

function workerOf(app: INestApplicationContext, group: string): PartitionWorker {
  return partitionWorker(app, group)!;
}

/** A parked line as a previous owner stored it: message `offset` of key `key`, tried once, next attempt at `n`. */
function parkedLine(offset: string, key: string, n: number): string {
  return JSON.stringify({ ids: [offset], k: key, a: 1, f: Date.now(), n, e: 'Error: down', t: offset, r: 0, c: 0 });
}

describe('a partition worker after it was told to stop', () => {
  let server: RedisServer;
  let probe: Redis;
  let app: INestApplicationContext | undefined;
  jest.setTimeout(30_000);

  beforeAll(async () => {
    server = await startRedisServer();
    probe = new Redis(server.url);
  });
  beforeEach(() => {
    calls.length = 0;
    gate.hold = undefined;
  });
  afterEach(async () => {
    jest.restoreAllMocks();
    await app?.close();
    app = undefined;
  });
  afterAll(async () => {
    probe.disconnect();
    await server.stop();
  });

  it('loading the parked lines: a hand-back during the retry backoff sends no HGETALL after the drain and ends without waiting out the stop timeout', async () => {
    const prefix = uniquePrefix('afterstop-load');
    const keys = new EventrailKeys(prefix, 1);
    const recoveryKey = keys.recovery('keyed', 0);
    app = await createApp({ redis: server.url, prefix, partitions: 1, autoStart: false }, [Keyed]);
    const client = app.get(EventrailRedis).client;
    // The worker's first load of its parked lines is sent once the key holds a string (the acquire, which
    // writes the hash, has run by then): Redis answers WRONGTYPE, as it would answer any trouble.
    let open: (() => void) | undefined;
    const opened = new Promise<void>((resolve) => (open = resolve));
    let drained = false;
    const loads = { failed: 0, afterDrain: 0 };
    const hgetall = client.hgetall.bind(client) as (key: string) => Promise<Record<string, string>>;
    jest.spyOn(client, 'hgetall').mockImplementation(((key: string) => {
      if (key !== recoveryKey) return hgetall(key);
      if (drained) loads.afterDrain++;
      return opened
        .then(() => hgetall(key))
        .catch((error: unknown) => {
          loads.failed++;
          throw error;
        });
    }) as never);

    await app.get(EventrailConsumers).start();
    await waitFor(() => app!.get(EventrailConsumers).ownership().keyed?.length === 1, 'the partition owned');
    await probe.del(recoveryKey);
    await probe.set(recoveryKey, 'in the way');
    open!();
    await waitFor(() => loads.failed >= 1, 'a load of the parked lines failed (the worker now waits its backoff)');

    drained = true;
    const warn = jest.spyOn(Logger.prototype, 'warn');
    // The stop's timeout is for handlers, and none runs: the worker ends with the backoff under way.
    await workerOf(app, 'keyed').stopGracefully(5_000, true);
    await probe.del(recoveryKey);

    const timedOut = warn.mock.calls.some(([message]) => String(message).includes('handlers still running after'));
    expect({ loadsAfterDrain: loads.afterDrain, timedOut }).toEqual({ loadsAfterDrain: 0, timedOut: false });
  });

  it("an operator's retry read while the worker is handed back is not lost", async () => {
    const prefix = uniquePrefix('afterstop-cmd');
    const keys = new EventrailKeys(prefix, 1);
    app = await createApp({ redis: server.url, prefix, partitions: 1, autoStart: false }, [Jobs]);
    const published = await app
      .get(EventrailPublisher)
      .publishMany([1, 2, 3].map((n) => ({ event: 'job.run', data: { n }, key: `k${n}` })));
    // Message 2 parked by an earlier owner, its next attempt ten minutes away.
    const lineField = `park:m:${published[1].offset}`;
    await probe.hset(keys.recovery('jobs', 0), lineField, parkedLine(published[1].offset, 'k2', Date.now() + 600_000));
    await app.get(EventrailConsumers).start();
    const admin = app.get(EventrailAdmin);
    await waitFor(async () => (await admin.group('jobs')).partitions[0].committed === published[2].offset, 'messages 1 and 3 committed');
    expect(calls).toEqual([1, 3]);

    // EventrailAdmin.retryParked('jobs') as it leaves the command (its announce reaches the worker as below).
    const commandField = 'parkcmd:retry:*';
    await probe.hset(keys.recovery('jobs', 0), commandField, JSON.stringify([published[1].offset]));
    const worker = workerOf(app, 'jobs');
    const applying = worker.applyParkedCommands();
    // The partition is handed back while the command is read.
    await worker.stopGracefully(10_000, true);
    await applying;

    const fields = await probe.hgetall(keys.recovery('jobs', 0));
    const line = JSON.parse(fields[lineField]) as { n: number };
    const kept = { commandStillInRedis: commandField in fields, lineDueNow: line.n <= Date.now() };
    // Either the command waits for the next owner, or its effect (the line due now) was stored.
    expect(kept.commandStillInRedis || kept.lineDueNow ? 'retry kept' : `retry lost: ${JSON.stringify(kept)}`).toBe('retry kept');
  });

  it('a redelivery that outlives the stop timeout sends no commit after the lease was released', async () => {
    const prefix = uniquePrefix('afterstop-redeliver');
    const keys = new EventrailKeys(prefix, 1);
    app = await createApp({ redis: server.url, prefix, partitions: 1, autoStart: false }, [Jobs]);
    const published = await app
      .get(EventrailPublisher)
      .publishMany([1, 2, 3].map((n) => ({ event: 'job.run', data: { n }, key: `k${n}` })));
    // Message 2 parked by an earlier owner and due now: the worker redelivers it at once, and its handler hangs.
    let finish: (() => void) | undefined;
    gate.hold = new Promise<void>((resolve) => (finish = resolve));
    await probe.hset(keys.recovery('jobs', 0), `park:m:${published[1].offset}`, parkedLine(published[1].offset, 'k2', Date.now() - 1_000));

    let stopped = false;
    const late: Array<{ offset: string; verdict: string }> = [];
    const commit = PartitionLease.prototype.commit;
    jest.spyOn(PartitionLease.prototype, 'commit').mockImplementation(async function (this: PartitionLease, ...args) {
      const verdict = await commit.apply(this, args);
      if (stopped) late.push({ offset: args[0], verdict });
      return verdict;
    });

    await app.get(EventrailConsumers).start();
    await waitFor(() => calls.includes(1) && calls.includes(2) && calls.includes(3), 'messages 1 and 3 handled, 2 redelivered');
    const worker = workerOf(app, 'jobs');
    const redelivery = (worker as unknown as { redelivery: { running: Map<string, unknown> } }).redelivery;

    // Shutdown with a short timeout: the hanging redelivery is left behind, the lease released.
    await worker.stopGracefully(300);
    stopped = true;
    expect(await probe.exists(keys.lease('jobs', 0))).toBe(0);
    finish!();
    await waitFor(() => redelivery.running.size === 0, 'the redelivery ended');

    expect(late).toEqual([]);
  });
});
