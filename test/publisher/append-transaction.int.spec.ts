import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailPublisher, PublishInput, PublishManyError } from '../../lib';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { EventrailKeys } from '../../lib/redis/keys';
import { eventrailAclRules } from '../../lib/redis/acl-rules';
import { createAclUser } from '../support/acl';
import { createApp } from '../support/app';
import { waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';
import { PathProxy } from '../faults/support/path-proxy';

/**
 * A `publishMany` of up to 1000 events without ids goes as one MULTI/EXEC of
 * plain XADDs (lean-command.ts, `sendLeanTransaction`). ioredis takes one reply
 * per queued command, so each XADD's `QUEUED` reply is taken by a part that
 * writes nothing: these suites check that the connection's replies stay in
 * step with its commands whatever happens to the transaction (refused,
 * cut off half answered, never answered, MULTI refused), and that each event
 * is reported as what it came to.
 */
const PARTITIONS = 4;

/** `cmdstat_<name>` calls from INFO commandstats. */
async function calls(redis: Redis, name: string): Promise<number> {
  const match = new RegExp(`^cmdstat_${name}:calls=(\\d+)`, 'm').exec(await redis.info('commandstats'));
  return Number(match?.[1] ?? 0);
}

describe('publishMany as one transaction', () => {
  let server: RedisServer;
  let redis: Redis;
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    redis?.disconnect();
    await server?.stop();
  });

  async function publisherOf(
    prefix: string,
    redisOptions: Record<string, unknown> = {},
    user?: { username: string; password: string },
  ): Promise<EventrailPublisher> {
    const app = await createApp({
      redis: { host: '127.0.0.1', port: server.port, ...user, ...redisOptions },
      prefix,
      partitions: PARTITIONS,
      dedupWindowMs: 600_000,
    });
    apps.push(app);
    const publisher = app.get(EventrailPublisher);
    // The first publishMany asks whether scripts run here; the transaction goes after the answer.
    await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n }, partition: 0 })));
    await redis.del(new EventrailKeys(prefix, PARTITIONS).stream(0));
    return publisher;
  }

  /** `[partition, n]` of the events of `event` in each partition, in stream order. */
  async function landed(prefix: string, event = 'tx'): Promise<Array<[number, number]>> {
    const keys = new EventrailKeys(prefix, PARTITIONS);
    const found: Array<[number, number]> = [];
    for (let p = 0; p < PARTITIONS; p++) {
      if ((await redis.type(keys.stream(p))) !== 'stream') continue;
      for (const [, fields] of await redis.xrange(keys.stream(p), '-', '+')) {
        if (fields[fields.indexOf('event') + 1] === event)
          found.push([p, (JSON.parse(fields[fields.indexOf('data') + 1]) as { n: number }).n]);
      }
    }
    return found;
  }

  /** What the events of `inputs` should leave in the log: per partition, in call order. */
  function expected(inputs: PublishInput[], partitionOf: (input: PublishInput) => number): Array<[number, number]> {
    const byPartition: Array<Array<[number, number]>> = Array.from({ length: PARTITIONS }, () => []);
    for (const input of inputs) byPartition[partitionOf(input)].push([partitionOf(input), (input.data as { n: number }).n]);
    return byPartition.flat();
  }

  it('appends up to 1000 events in one MULTI/EXEC and answers each offset, over 40 generated calls', async () => {
    const prefix = 'tx-shapes';
    const publisher = await publisherOf(prefix);
    const random = seededRandom(7);
    const all: PublishInput[] = [];
    const before = { multi: await calls(redis, 'multi'), exec: await calls(redis, 'exec'), evalsha: await calls(redis, 'evalsha') };
    for (let call = 0; call < 40; call++) {
      const count = 2 + Math.floor(random() * 999);
      const inputs: PublishInput[] = Array.from({ length: count }, () => {
        const n = all.length;
        const input: PublishInput = {
          event: 'tx',
          data: { n, text: 'é€'.repeat(Math.floor(random() * 40)) },
          partition: Math.floor(random() * PARTITIONS),
        };
        all.push(input);
        return input;
      });
      const results = await publisher.publishMany(inputs);
      expect(results).toHaveLength(count);
      for (const [i, result] of results.entries()) {
        expect(result.partition).toBe(inputs[i].partition);
        const [entry] = await redis.xrange(new EventrailKeys(prefix, PARTITIONS).stream(result.partition), result.offset, result.offset);
        expect(JSON.parse(entry[1][entry[1].indexOf('data') + 1])).toEqual(inputs[i].data);
      }
    }
    expect(await landed(prefix)).toEqual(expected(all, (input) => input.partition as number));
    expect((await calls(redis, 'multi')) - before.multi).toBe(40);
    expect((await calls(redis, 'exec')) - before.exec).toBe(40);
    expect((await calls(redis, 'evalsha')) - before.evalsha).toBe(0);
  });

  it('sends the publish calls of one tick as transactions of at most 128 appends, each call answered with its own offset, in call order', async () => {
    const prefix = 'tx-publish-parts';
    const publisher = await publisherOf(prefix);
    const random = seededRandom(11);
    for (const count of [129, 300, 1000]) {
      await redis.del(...Array.from({ length: PARTITIONS }, (_, p) => new EventrailKeys(prefix, PARTITIONS).stream(p)));
      const before = { multi: await calls(redis, 'multi'), exec: await calls(redis, 'exec'), xadd: await calls(redis, 'xadd') };
      const inputs: PublishInput[] = Array.from({ length: count }, (_, n) => ({
        event: 'tx',
        data: { n, text: 'é€'.repeat(Math.floor(random() * 40)) },
        partition: Math.floor(random() * PARTITIONS),
      }));
      // One tick: the first goes alone, the rest are queued and leave when the tick ends.
      const results = await Promise.all(
        inputs.map(({ event, data, partition }) => publisher.publish(event as string, data, { partition })),
      );
      for (const [i, result] of results.entries()) {
        expect(result.partition).toBe(inputs[i].partition);
        const [entry] = await redis.xrange(new EventrailKeys(prefix, PARTITIONS).stream(result.partition), result.offset, result.offset);
        expect(JSON.parse(entry[1][entry[1].indexOf('data') + 1])).toEqual(inputs[i].data);
      }
      expect(await landed(prefix)).toEqual(expected(inputs, (input) => input.partition as number));
      const parts = Math.ceil((count - 1) / 128);
      expect((await calls(redis, 'multi')) - before.multi).toBe(parts);
      expect((await calls(redis, 'exec')) - before.exec).toBe(parts);
      expect((await calls(redis, 'xadd')) - before.xadd).toBe(count);
    }
  });

  it('writes each event as given, whatever its name, key and headers: names framed once and kept, past the 1024 kept', async () => {
    const prefix = 'tx-names';
    const publisher = await publisherOf(prefix);
    const keys = new EventrailKeys(prefix, PARTITIONS);
    const random = seededRandom(61);
    // 1500 names, a third of them with characters of two, three and four UTF-8 bytes, so that the names kept
    // are dropped and framed again during the calls, and the same name comes back framed as before.
    const names = Array.from({ length: 1500 }, (_, i) => (i % 3 === 0 ? `événement.漢字.${i}.😀` : `order.${i}`));
    for (let call = 0; call < 4; call++) {
      const inputs: PublishInput[] = Array.from({ length: 900 }, (_, n) => {
        const input: PublishInput = { event: names[Math.floor(random() * names.length)], data: { call, n } };
        if (random() < 0.5) input.key = `clé-${Math.floor(random() * 50)}`;
        else input.partition = Math.floor(random() * PARTITIONS);
        if (random() < 0.3) input.headers = { 'x-tenant': `tenant-${n}-ü` };
        return input;
      });
      const results = await publisher.publishMany(inputs);
      for (const [i, result] of results.entries()) {
        const [[, fields]] = await redis.xrange(keys.stream(result.partition), result.offset, result.offset);
        const field = (name: string): string | undefined => (fields.includes(name) ? fields[fields.indexOf(name) + 1] : undefined);
        expect(field('event')).toBe(inputs[i].event);
        expect(field('key')).toBe(inputs[i].key);
        expect(JSON.parse(field('data') as string)).toEqual(inputs[i].data);
        if (inputs[i].headers) expect(JSON.parse(field('headers') as string)).toMatchObject(inputs[i].headers as object);
        else expect(field('headers')).toBeUndefined();
      }
    }
  });

  it('a transaction written in parts as it is built that cannot finish: a big entry late in it ends it, the rest going as runs behind it; a getter that throws late appends nothing', async () => {
    const prefix = 'tx-streamed';
    const publisher = await publisherOf(prefix);
    // A transaction answered on this connection first: the later ones are written in parts of 128 events.
    await publisher.publishMany([0, 1].map((n) => ({ event: 'first', data: { n }, partition: 1 })));
    const before = { discard: await calls(redis, 'discard'), exec: await calls(redis, 'exec'), evalsha: await calls(redis, 'evalsha') };
    // Event 500 of 600 is over 16 KiB: the 500 events before it are committed as the transaction, the rest go as
    // runs behind its EXEC, guarded by a mark it sets (never DISCARD and runs for all: see `commitThenRuns`).
    const withBig: PublishInput[] = Array.from({ length: 600 }, (_, n) => ({
      event: 'tx',
      data: n === 500 ? { n, big: 'x'.repeat(20_000) } : { n },
      partition: n % PARTITIONS,
    }));
    const results = await publisher.publishMany(withBig);
    expect(await landed(prefix)).toEqual(expected(withBig, (input) => input.partition as number));
    for (const [i, result] of results.entries()) {
      const [entry] = await redis.xrange(new EventrailKeys(prefix, PARTITIONS).stream(result.partition), result.offset, result.offset);
      expect(JSON.parse(entry[1][entry[1].indexOf('data') + 1])).toEqual(withBig[i].data);
    }
    expect((await calls(redis, 'discard')) - before.discard).toBe(0);
    expect((await calls(redis, 'exec')) - before.exec).toBe(1);
    expect((await calls(redis, 'evalsha')) - before.evalsha).toBeGreaterThan(0);
    // The runs' guards are gone with the last run of each partition.
    expect((await redis.keys(`{${prefix}:*`)).filter((key) => key.includes(':run:'))).toEqual([]);
    // Data whose getter throws at its second read (the serialisation), at event 450 of 600: nothing appended.
    let reads = 0;
    const throwing: PublishInput[] = Array.from({ length: 600 }, (_, n) => ({
      event: 'late',
      data:
        n === 450
          ? {
              get n(): number {
                if (++reads > 1) throw new Error('read twice');
                return n;
              },
            }
          : { n },
      partition: n % PARTITIONS,
    }));
    const error = (await publisher.publishMany(throwing).catch((e: unknown) => e)) as PublishManyError;
    expect(error).toBeInstanceOf(PublishManyError);
    expect(error.outcomes).toEqual(throwing.map(() => 'not-appended'));
    expect(await landed(prefix, 'late')).toEqual([]);
    expect((await calls(redis, 'discard')) - before.discard).toBe(1);
    // And the connection's replies are in step after both.
    const single = await publisher.publish('after', { n: 0 }, { partition: 2 });
    const [last] = await redis.xrevrange(new EventrailKeys(prefix, PARTITIONS).stream(2), '+', '-', 'COUNT', 1);
    expect(single.offset).toBe(last[0]);
  });

  it('refuses the events of a partition whose key is not a stream, appends the others, and says which', async () => {
    const prefix = 'tx-wrongtype';
    const publisher = await publisherOf(prefix);
    await redis.set(new EventrailKeys(prefix, PARTITIONS).stream(2), 'not a stream');
    const inputs: PublishInput[] = Array.from({ length: 40 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
    const error = (await publisher.publishMany(inputs).catch((e: unknown) => e)) as PublishManyError;
    expect(error).toBeInstanceOf(PublishManyError);
    expect(error.outcomes).toEqual(inputs.map((input) => (input.partition === 2 ? 'not-appended' : 'appended')));
    expect(String(error.cause)).toContain('WRONGTYPE');
    expect(await landed(prefix)).toEqual(expected(inputs, (input) => input.partition as number).filter(([p]) => p !== 2));
    // The connection's replies are still in step: the next call answers its own offsets.
    await redis.del(new EventrailKeys(prefix, PARTITIONS).stream(2));
    const next = await publisher.publishMany([
      { event: 'after', data: { n: 0 }, partition: 2 },
      { event: 'after', data: { n: 1 }, partition: 2 },
    ]);
    expect(await landed(prefix, 'after')).toEqual([
      [2, 0],
      [2, 1],
    ]);
    expect(next.map((r) => r.offset)).toEqual(
      (await redis.xrange(new EventrailKeys(prefix, PARTITIONS).stream(2), '-', '+')).map(([id]) => id),
    );
  });

  /** The publisher's connection id (CLIENT ID), to cut it from the server. */
  async function connectionOf(publisher: EventrailPublisher): Promise<string> {
    const client = (publisher as unknown as { redis: EventrailRedis }).redis.client as Redis;
    return String(await client.client('ID'));
  }

  it('loses nothing and keeps replies in step when the connection is cut after MULTI was answered, before the transaction ran', async () => {
    const prefix = 'tx-cut-half';
    const publisher = await publisherOf(prefix);
    const id = await connectionOf(publisher);
    const inputs: PublishInput[] = Array.from({ length: 300 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
    // Writes pause: Redis answers MULTI, then holds the first XADD (the client is blocked inside MULTI).
    await redis.call('CLIENT', 'PAUSE', '20000', 'WRITE');
    try {
      const sent = publisher.publishMany(inputs).catch((e: unknown) => e);
      await waitFor(
        async () => /flags=xb .*cmd=xadd/.test(String(await redis.call('CLIENT', 'LIST', 'ID', id))),
        'the first XADD held by the pause',
      );
      await redis.call('CLIENT', 'KILL', 'ID', id);
      const error = (await sent) as PublishManyError;
      expect(error).toBeInstanceOf(PublishManyError);
      expect(error.outcomes).toEqual(inputs.map(() => 'unknown'));
    } finally {
      await redis.call('CLIENT', 'UNPAUSE');
    }
    const eventrailRedis = (publisher as unknown as { redis: EventrailRedis }).redis;
    await waitFor(() => eventrailRedis.isReady(), 'the publisher reconnected');
    // Redis dropped the transaction with the connection, and ioredis did not send its rest again alone:
    // nothing of it landed, and the calls after the reconnect answer their own offsets.
    const after = await publisher.publishMany(inputs.map((input) => ({ ...input, event: 'after' })));
    expect(await landed(prefix)).toEqual([]);
    expect(await landed(prefix, 'after')).toEqual(expected(inputs, (input) => input.partition as number));
    for (const [i, result] of after.entries()) {
      const [entry] = await redis.xrange(new EventrailKeys(prefix, PARTITIONS).stream(result.partition), result.offset, result.offset);
      expect(JSON.parse(entry[1][entry[1].indexOf('data') + 1])).toEqual(inputs[i].data);
    }
    const single = await publisher.publish('after', { n: 300 }, { partition: 1 });
    const [last] = await redis.xrevrange(new EventrailKeys(prefix, PARTITIONS).stream(1), '+', '-', 'COUNT', 1);
    expect(single.offset).toBe(last[0]);
  });

  it('does not send a transaction again after the connection is lost before its answer: outcomes unknown, and it lands at most once', async () => {
    const prefix = 'tx-cut-unsent';
    const proxy = await PathProxy.start(server.url);
    try {
      const publisher = await publisherOf(prefix, { port: Number(new URL(proxy.url).port) });
      const inputs: PublishInput[] = Array.from({ length: 200 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
      // The path goes silent: the transaction is written and held on the way; then the connection dies with it.
      proxy.silence();
      const outcome = await new Promise<unknown>((resolve) => {
        publisher.publishMany(inputs).then(resolve, resolve);
        setImmediate(() => proxy.drop());
      });
      // Redis may have run it before the reply was lost (it did not here: the proxy held it), so it is not sent again.
      expect(outcome).toBeInstanceOf(PublishManyError);
      expect((outcome as PublishManyError).outcomes).toEqual(inputs.map(() => 'unknown'));
      // The next call goes on the new connection and answers its own offset; the cut transaction never followed.
      const eventrailRedis = (publisher as unknown as { redis: EventrailRedis }).redis;
      await waitFor(() => eventrailRedis.isReady(), 'the publisher reconnected');
      const single = await publisher.publish('after', { n: 0 }, { partition: 3 });
      const [last] = await redis.xrevrange(new EventrailKeys(prefix, PARTITIONS).stream(3), '+', '-', 'COUNT', 1);
      expect(single.offset).toBe(last[0]);
      expect(await landed(prefix)).toEqual([]);
      // Nothing of it landed here, so a plain retry lands each event once (with ids and dedupWindowMs where it may have).
      const retried = await publisher.publishMany(inputs);
      expect(retried).toHaveLength(200);
      expect(await landed(prefix)).toEqual(expected(inputs, (input) => input.partition as number));
    } finally {
      await proxy.close();
    }
  });

  it('a publishMany made as the connection closes (ready, its socket no longer writable) still goes as one transaction, on the new connection', async () => {
    const prefix = 'tx-closing';
    const publisher = await publisherOf(prefix);
    const client = (publisher as unknown as { redis: EventrailRedis }).redis.client as Redis;
    // 300 events: a transaction written in parts (Redis answered a MULTI on this client before: the warm-up).
    const inputs: PublishInput[] = Array.from({ length: 300 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
    const before = { exec: await calls(redis, 'exec'), scripts: (await calls(redis, 'evalsha')) + (await calls(redis, 'eval')) };
    // The moment between the socket's end and ioredis's close handler: still `ready`, no longer writable.
    const socket = (client as unknown as { stream: { end(): void; writable: boolean } }).stream;
    socket.end();
    expect({ status: client.status, writable: socket.writable }).toEqual({ status: 'ready', writable: false });
    const results = await publisher.publishMany(inputs);
    expect({ exec: await calls(redis, 'exec'), scripts: (await calls(redis, 'evalsha')) + (await calls(redis, 'eval')) }).toEqual({
      exec: before.exec + 1,
      scripts: before.scripts,
    });
    expect(await landed(prefix)).toEqual(expected(inputs, (input) => input.partition as number));
    for (const [i, result] of results.entries()) {
      const [entry] = await redis.xrange(new EventrailKeys(prefix, PARTITIONS).stream(result.partition), result.offset, result.offset);
      expect(JSON.parse(entry[1][entry[1].indexOf('data') + 1])).toEqual(inputs[i].data);
    }
  });

  it('where the ACL refuses MULTI, each XADD runs on its own and its offset is still answered, once', async () => {
    const prefix = 'tx-acl';
    const rules = eventrailAclRules(prefix);
    await createAclUser(redis, 'no-multi', 'secret', `${rules.full} ${rules.optional} -multi`);
    // A new log is recorded with a MULTI (a user that may not run one attaches only to an existing log).
    await redis.hset(new EventrailKeys(prefix, PARTITIONS).meta, 'partitions', String(PARTITIONS));
    const publisher = await publisherOf(prefix, {}, { username: 'no-multi', password: 'secret' });
    const inputs: PublishInput[] = Array.from({ length: 60 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
    const results = await publisher.publishMany(inputs);
    expect(await landed(prefix)).toEqual(expected(inputs, (input) => input.partition as number));
    for (const [i, result] of results.entries()) {
      const [entry] = await redis.xrange(new EventrailKeys(prefix, PARTITIONS).stream(result.partition), result.offset, result.offset);
      expect(JSON.parse(entry[1][entry[1].indexOf('data') + 1])).toEqual(inputs[i].data);
    }
    // And the connection is in step after it.
    const single = await publisher.publish('after', { n: 0 }, { partition: 0 });
    const [last] = await redis.xrevrange(new EventrailKeys(prefix, PARTITIONS).stream(0), '+', '-', 'COUNT', 1);
    expect(single.offset).toBe(last[0]);
  });

  it('goes as runs where a transaction cannot be written as it is (a client keyPrefix or reconnectOnError), and over RESP3 as a transaction', async () => {
    for (const [prefix, options, transaction] of [
      ['tx-reconnect', { reconnectOnError: () => false }, false],
      ['tx-resp3', { protocol: 3 }, true],
    ] as const) {
      const publisher = await publisherOf(prefix, options);
      const before = { exec: await calls(redis, 'exec'), evalsha: await calls(redis, 'evalsha') };
      const inputs: PublishInput[] = Array.from({ length: 50 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
      const results = await publisher.publishMany(inputs);
      expect(results).toHaveLength(50);
      expect(await landed(prefix)).toEqual(expected(inputs, (input) => input.partition as number));
      expect((await calls(redis, 'exec')) - before.exec).toBe(transaction ? 1 : 0);
      expect((await calls(redis, 'evalsha')) - before.evalsha).toBe(transaction ? 0 : PARTITIONS);
    }
  });
});
