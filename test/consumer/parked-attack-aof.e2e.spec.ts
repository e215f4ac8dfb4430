import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { DurableRedis } from '../faults/support/durable-redis';
import { createApp } from '../support/app';
import { waitFor } from '../support/helpers';

type Data = { key: string; n: number };

/** Keys in `down` fail; a call of a name in `hold` waits until it is taken out; successes are recorded in order. */
const dependency = {
  down: new Set<string>(),
  hold: new Set<string>(),
  calls: [] as string[],
  handled: [] as string[],
  async call(message: EventrailMessage<Data>): Promise<void> {
    const name = `${message.data.key}${message.data.n}`;
    this.calls.push(name);
    while (this.hold.has(name)) await new Promise((resolve) => setTimeout(resolve, 10));
    if (this.down.has(message.data.key)) throw new Error(`${message.data.key} is down`);
    this.handled.push(name);
  },
};

@Injectable()
class ByKey {
  @OnEvent('account.changed', {
    group: 'aof',
    ordering: 'key',
    lockTtlMs: 1_000,
    heartbeatTtlMs: 1_000,
    maxRetries: 0,
    redelivery: { delayMs: 50, factor: 2, maxDelayMs: 100, maxAgeMs: 600_000 },
  })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('parked keys under attack: Redis killed and restarted from its AOF', () => {
  let server: DurableRedis;
  let redis: Redis;
  let app: INestApplicationContext | undefined;
  const keys = new EventrailKeys('eventrail', 1);

  const publish = (names: string[]) =>
    app!
      .get(EventrailPublisher)
      .publishMany(names.map((name) => ({ event: 'account.changed', data: { key: name[0], n: Number(name.slice(1)) }, key: name[0] })));
  /** After a restart: the client reconnects on its own; until then a publish is refused unsent. */
  const publishOnceBack = (names: string[]) => waitFor(() => publish(names).catch(() => undefined), 'a publish after the restart');
  const firstHandlings = (key: string) => [...new Set(dependency.handled.filter((name) => name.startsWith(key)))];
  const parkedLines = async () => Object.keys(await redis.hgetall(keys.recovery('aof', 0))).filter((f) => f.startsWith('park:'));

  beforeEach(async () => {
    server = await DurableRedis.start();
    redis = new Redis(server.url, { maxRetriesPerRequest: null });
    Object.assign(dependency, { down: new Set(), hold: new Set(), calls: [], handled: [] });
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    redis.disconnect();
    await server.destroy();
  });

  it('parked lines cycling through their tiers across a 1.5 s outage: nothing lost, each key in order', async () => {
    app = await createApp({ redis: server.url }, [ByKey]);
    dependency.down.add('A');
    await publish(['A1', 'B1', 'A2']);
    await waitFor(() => dependency.handled.includes('B1'), 'B1 handled');
    await waitFor(async () => (await parkedLines()).length === 1, 'A parked');
    await server.crashAndRestart(1_500);
    await publishOnceBack(['A3', 'B2']);
    dependency.down.delete('A');
    await waitFor(
      () => firstHandlings('A').length === 3 && firstHandlings('B').length === 2,
      () => `handled ${dependency.handled.join(',')}`,
      30_000,
    );
    expect(firstHandlings('A')).toEqual(['A1', 'A2', 'A3']);
    await waitFor(async () => (await parkedLines()).length === 0, 'the line released', 20_000);
    expect(await app.get(EventrailAdmin).deadLetterCount('aof')).toBe(0);
  }, 60_000);

  it('a redelivery that succeeds while Redis is down: the head and the rest of its line are handled, in order', async () => {
    app = await createApp({ redis: server.url }, [ByKey]);
    dependency.down.add('A');
    await publish(['A1', 'B1', 'A2', 'A3']);
    await waitFor(async () => dependency.handled.includes('B1') && (await parkedLines()).length === 1, 'A parked, B1 handled');
    dependency.hold.add('A1');
    const before = dependency.calls.length;
    await waitFor(() => dependency.calls.slice(before).includes('A1'), 'a redelivery of A1 running');
    dependency.down.delete('A');
    const pid = server.pid;
    const restarted = server.crashAndRestart(1_500);
    // A1's handler returns while Redis is down.
    await waitFor(() => !isAlive(pid), 'Redis killed');
    dependency.hold.delete('A1');
    await restarted;
    await publishOnceBack(['A4']);
    await waitFor(
      () => firstHandlings('A').length === 4,
      () => `handled ${dependency.handled.join(',')}`,
      30_000,
    );
    expect(firstHandlings('A')).toEqual(['A1', 'A2', 'A3', 'A4']);
    await waitFor(async () => (await parkedLines()).length === 0, 'the line released', 20_000);
  }, 60_000);
});
