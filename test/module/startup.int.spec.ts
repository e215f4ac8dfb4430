import { Injectable, INestApplicationContext, Module, Scope } from '@nestjs/common';
import { Test, TestingModule } from '@nestjs/testing';
import Redis from 'ioredis';
import {
  EventrailConsumers,
  EventrailMessage,
  EventrailModule,
  EventrailPublisher,
  InvalidHandlerError,
  InvalidOptionError,
  OnEvent,
  PartitionMismatchError,
  RedisUnavailableError,
} from '../../lib';
import { RebalanceSignal } from '../../lib/consumer/coordination/rebalance-signal';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';
import { freePort, RedisServer, startRedisServer } from '../support/redis-server';

async function initError(imports: unknown[], providers: unknown[] = []): Promise<unknown> {
  try {
    const moduleRef = await Test.createTestingModule({ imports: imports as never[], providers: providers as never[] }).compile();
    const app = await moduleRef.init();
    await app.close();
    return undefined;
  } catch (error) {
    return error;
  }
}

/** SIGKILLs `server` (by pid) the first time `kill` is called; `killed` settles once it has exited. */
function outage(server: RedisServer): { kill(): void; readonly killed: Promise<void> | undefined } {
  let killed: Promise<void> | undefined;
  return {
    kill: () => {
      if (killed) return;
      process.kill(server.pid, 'SIGKILL');
      killed = server.stop();
    },
    get killed() {
      return killed;
    },
  };
}

/**
 * Starts `moduleRef` with `server` SIGKILLed once the log's check has passed,
 * before the consumers subscribe and join, and returns once startup has tried
 * the subscription a second time (Redis still down). `started` is `init()`.
 */
async function initThroughOutageAfterLogCheck(
  moduleRef: TestingModule,
  server: RedisServer,
): Promise<{ started: Promise<INestApplicationContext> }> {
  const eventrailRedis = moduleRef.get(EventrailRedis);
  const down = outage(server);
  const check = eventrailRedis.whenPrepared.bind(eventrailRedis);
  eventrailRedis.whenPrepared = async () => {
    await check();
    down.kill();
  };
  // Until the groups are joined, connections are only made for the rebalance subscription: one per try.
  const duplicate = eventrailRedis.duplicate.bind(eventrailRedis);
  let subscribeTries = 0;
  eventrailRedis.duplicate = () => {
    subscribeTries++;
    return duplicate();
  };
  const started = moduleRef.init();
  await waitFor(() => down.killed !== undefined, 'Redis killed after the log check');
  await down.killed;
  await waitFor(() => subscribeTries >= 2, 'a second try of the subscription');
  return { started };
}

describe('startup and outages', () => {
  let redis: Redis;
  const prefix = uniquePrefix('start');

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  afterAll(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  it('refuses a partition count other than the recorded one, naming both', async () => {
    const app = await createApp({ prefix, partitions: 4 });
    await app.close();
    const error = await initError([EventrailModule.forRoot({ redis: testRedisUrl(), prefix, partitions: 6 })]);
    expect(error).toBeInstanceOf(PartitionMismatchError);
    expect((error as Error).message).toContain('created with partitions: 4');
    expect((error as Error).message).toContain('configured with partitions: 6');
    expect(await redis.hget(new EventrailKeys(prefix, 4).meta, 'partitions')).toBe('4');
  });

  it('fails invalid options at forRoot and at forRootAsync, naming the option', async () => {
    expect(() => EventrailModule.forRoot({ partitions: -1 })).toThrow(InvalidOptionError);
    const error = await initError([
      EventrailModule.forRootAsync({ useFactory: () => ({ redis: testRedisUrl(), consumer: { batchSize: 0 } }) }),
    ]);
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as Error).message).toContain('consumer.batchSize');
  });

  it('takes its options from forRootAsync with injected providers', async () => {
    const asyncPrefix = `${prefix}-async`;
    @Injectable()
    class Config {
      url = testRedisUrl();
    }
    @Module({ providers: [Config], exports: [Config] })
    class ConfigModule {}
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRootAsync({
          imports: [ConfigModule],
          inject: [Config],
          useFactory: (config: Config) => ({ redis: config.url, prefix: asyncPrefix }),
        }),
      ],
    }).compile();
    const app = await moduleRef.init();
    const result = await app.get(EventrailPublisher).publish('async.works', {});
    expect(await redis.xlen(new EventrailKeys(asyncPrefix, 1).stream(0))).toBe(1);
    expect(result.partition).toBe(0);
    await app.close();
    await deletePrefix(redis, asyncPrefix);
  });

  it('fails startup with RedisUnavailableError after startupTimeoutMs when Redis does not answer', async () => {
    const port = await freePort();
    const started = Date.now();
    const error = await initError([EventrailModule.forRoot({ redis: `redis://127.0.0.1:${port}`, prefix, startupTimeoutMs: 400 })]);
    expect(error).toBeInstanceOf(RedisUnavailableError);
    expect((error as Error).message).toContain('startupTimeoutMs (400 ms)');
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('waits out Redis going away between the connection and the log check, and starts once it is back within startupTimeoutMs', async () => {
    let server = await startRedisServer();
    const { port } = server;
    const moduleRef = await Test.createTestingModule({
      imports: [EventrailModule.forRoot({ redis: server.url, prefix, startupTimeoutMs: 15_000 })],
    }).compile();
    const redis = moduleRef.get(EventrailRedis);
    // Counts startup's tries of the log check.
    const check = redis.whenPrepared.bind(redis);
    let tries = 0;
    redis.whenPrepared = () => {
      tries++;
      return check();
    };
    // Redis dies as the connection becomes ready (this listener runs before startup's own), or now if it already is.
    const down = outage(server);
    if (redis.client.status === 'ready') down.kill();
    else redis.client.once('ready', down.kill);
    const started = moduleRef.init();
    await waitFor(() => down.killed !== undefined, 'Redis killed at the first ready');
    await down.killed;
    // The first check failed (its retries per request ran out while Redis was down) and startup tries again.
    await waitFor(() => tries >= 2, 'a second try of the startup check');
    server = await startRedisServer(port);
    try {
      const app = await started;
      expect(await app.get(EventrailPublisher).publish('after.restart', {})).toMatchObject({ partition: 0 });
      await app.close();
    } finally {
      await server.stop();
    }
  });

  it('waits out Redis going away after the log check, as the consumers join their groups, and consumes once it is back', async () => {
    const handled: unknown[] = [];
    @Injectable()
    class Handlers {
      @OnEvent('after.outage', 'startup-outage')
      handle(message: EventrailMessage): void {
        handled.push(message.data);
      }
    }
    let server = await startRedisServer();
    const { port } = server;
    const moduleRef = await Test.createTestingModule({
      imports: [EventrailModule.forRoot({ redis: server.url, prefix: uniquePrefix('start-join'), startupTimeoutMs: 15_000 })],
      providers: [Handlers],
    }).compile();
    const { started } = await initThroughOutageAfterLogCheck(moduleRef, server);
    server = await startRedisServer(port);
    try {
      const app = await started;
      await app.get(EventrailPublisher).publish('after.outage', { n: 1 });
      await app.get(EventrailConsumers).settled();
      expect(handled).toEqual([{ n: 1 }]);
      await app.close();
    } finally {
      await server.stop();
    }
  });

  it('stays stopped when stopped while its start waits out an outage: nothing joins or takes a lease once Redis is back', async () => {
    @Injectable()
    class Handlers {
      @OnEvent('never.started', 'startup-stop')
      handle(): void {}
    }
    let server = await startRedisServer();
    const { port } = server;
    const logPrefix = uniquePrefix('start-stop');
    const moduleRef = await Test.createTestingModule({
      imports: [EventrailModule.forRoot({ redis: server.url, prefix: logPrefix, startupTimeoutMs: 15_000 })],
      providers: [Handlers],
    }).compile();
    const { started } = await initThroughOutageAfterLogCheck(moduleRef, server);
    // The stop does not wait for Redis; the start must not go on once Redis is back.
    await moduleRef.get(EventrailConsumers).stop();
    server = await startRedisServer(port);
    const inspect = new Redis(server.url);
    try {
      const app = await started;
      const keys = new EventrailKeys(logPrefix, 1);
      expect(app.get(EventrailConsumers).isRunning).toBe(false);
      expect(await inspect.exists(keys.lease('startup-stop', 0), keys.members('startup-stop'))).toBe(0);
      await app.close();
    } finally {
      inspect.disconnect();
      await server.stop();
    }
  });

  it('stays stopped when stopped while a group joins during an outage: what the join took goes back once Redis is back', async () => {
    @Injectable()
    class Handlers {
      @OnEvent('never.joined', 'startup-join-stop')
      handle(): void {}
    }
    let server = await startRedisServer();
    const { port } = server;
    const logPrefix = uniquePrefix('join-stop');
    const moduleRef = await Test.createTestingModule({
      imports: [EventrailModule.forRoot({ redis: server.url, prefix: logPrefix, startupTimeoutMs: 15_000 })],
      providers: [Handlers],
    }).compile();
    // Redis dies once the rebalance subscription is in place, as the group sends its join.
    const original = RebalanceSignal.prototype.listen;
    const down = outage(server);
    const listen = jest.spyOn(RebalanceSignal.prototype, 'listen').mockImplementation(async function (this: RebalanceSignal, onGroup) {
      await original.call(this, onGroup);
      down.kill();
    });
    const inspect = new Redis(port, { lazyConnect: true });
    try {
      const started = moduleRef.init();
      await waitFor(() => down.killed !== undefined, 'Redis killed after the subscription');
      await down.killed;
      // The join waits for Redis (or for its next try); the stop does not.
      await moduleRef.get(EventrailConsumers).stop();
      server = await startRedisServer(port);
      const app = await started;
      const keys = new EventrailKeys(logPrefix, 1);
      expect(app.get(EventrailConsumers).isRunning).toBe(false);
      expect(await inspect.exists(keys.lease('startup-join-stop', 0), keys.members('startup-join-stop'))).toBe(0);
      await app.close();
    } finally {
      listen.mockRestore();
      inspect.disconnect();
      await server.stop();
    }
  });

  it('starts degraded when allowed, rejects publishes while Redis is down, and recovers when it comes up', async () => {
    const port = await freePort();
    const app = await createApp({ redis: `redis://127.0.0.1:${port}`, prefix, startupTimeoutMs: 200, allowDegradedStart: true });
    const publisher = app.get(EventrailPublisher);
    await expect(publisher.publish('while.down', {})).rejects.toBeInstanceOf(RedisUnavailableError);
    const server = await startRedisServer(port);
    try {
      const result = await waitFor(() => publisher.publish('after.up', {}).catch(() => undefined), 'publish after Redis came up');
      expect(result.partition).toBe(0);
    } finally {
      await app.close();
      await server.stop();
    }
  });

  it('rejects publishes with RedisUnavailableError when Redis dies, and never resolves one that was not appended', async () => {
    const server = await startRedisServer();
    const app: INestApplicationContext = await createApp({ redis: server.url, prefix });
    const publisher = app.get(EventrailPublisher);
    await publisher.publish('before', {});
    await server.stop('SIGKILL');
    const outcomes = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => publisher.publish('during', { i })));
    expect(outcomes.every((o) => o.status === 'rejected')).toBe(true);
    for (const o of outcomes) expect((o as PromiseRejectedResult).reason).toBeInstanceOf(RedisUnavailableError);
    await app.close();
  });
});

describe('@OnEvent mistakes fail startup naming the class and method', () => {
  const imports = (): unknown[] => [EventrailModule.forRoot({ redis: testRedisUrl(), prefix: uniquePrefix('bad') })];

  it('refuses a request-scoped provider', async () => {
    @Injectable({ scope: Scope.REQUEST })
    class PerRequest {
      @OnEvent('x', 'g')
      handle(): void {}
    }
    const error = await initError(imports(), [PerRequest]);
    expect(error).toBeInstanceOf(InvalidHandlerError);
    expect((error as Error).message).toContain('PerRequest.handle');
    expect((error as Error).message).toContain('request-scoped');
  });

  it('refuses a property that is not a method', async () => {
    @Injectable()
    class NotAMethod {
      @OnEvent('x', 'g')
      handler = 'nope';
    }
    const error = await initError(imports(), [NotAMethod]);
    expect(error).toBeInstanceOf(InvalidHandlerError);
    expect((error as Error).message).toContain('NotAMethod.handler: it is not a method');
  });

  it('refuses an invalid group name and an invalid event name', async () => {
    @Injectable()
    class BadGroup {
      @OnEvent('x', 'no spaces please')
      handle(): void {}
    }
    @Injectable()
    class BadEvent {
      @OnEvent(['ok', ''], 'g')
      handle(): void {}
    }
    const groupError = await initError(imports(), [BadGroup]);
    expect(groupError).toBeInstanceOf(InvalidHandlerError);
    expect((groupError as Error).message).toContain('BadGroup.handle');
    expect((groupError as Error).message).toContain('"no spaces please"');
    const eventError = await initError(imports(), [BadEvent]);
    expect(eventError).toBeInstanceOf(InvalidHandlerError);
    expect((eventError as Error).message).toContain('BadEvent.handle');
  });

  it('refuses invalid decorator options, naming the method', async () => {
    @Injectable()
    class BadOptions {
      @OnEvent('x', { group: 'g', concurrency: -2 })
      handle(): void {}
    }
    const error = await initError(imports(), [BadOptions]);
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as Error).message).toContain('@OnEvent on BadOptions.handle.concurrency');
  });
});
