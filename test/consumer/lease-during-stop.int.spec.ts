import { Injectable, INestApplicationContext } from '@nestjs/common';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { GroupConsumer } from '../../lib/consumer/lifecycle/group-consumer';
import { createApp } from '../support/app';
import { groupConsumer } from './support/internals';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

/**
 * A worker told to stop (a shutdown, or a hand-back to a member that joined) lets its running handlers
 * finish, up to `shutdownTimeoutMs`. Its lease must hold for that long: if it lapses, another member
 * takes the partition from the last commit and starts the same events while they still run here
 * (two workers on one partition, the key order broken). The leases here are short (600 ms) and the
 * handlers outlast several of them, well within `shutdownTimeoutMs`.
 */

type Data = { n: string };

const world = {
  /** `<app>:<event>` for every handler start, in order. */
  starts: [] as string[],
  gates: new Map<string, { open: () => void; opened: Promise<void> }>(),
};

function gate(n: string): () => void {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  world.gates.set(n, { open, opened });
  return open;
}

async function handle(app: string, message: EventrailMessage<Data>): Promise<void> {
  world.starts.push(`${app}:${message.data.n}`);
  await world.gates.get(message.data.n)?.opened;
}

const GROUP = {
  group: 'slow',
  ordering: 'partition',
  concurrency: 2,
  lockTtlMs: 600,
  heartbeatTtlMs: 600,
  shutdownTimeoutMs: 20_000,
} as const;

@Injectable()
class First {
  @OnEvent('slow.event', GROUP)
  handle(message: EventrailMessage<Data>): Promise<void> {
    return handle('first', message);
  }
}

@Injectable()
class Second {
  @OnEvent('slow.event', GROUP)
  handle(message: EventrailMessage<Data>): Promise<void> {
    return handle('second', message);
  }
}

describe('the lease of a worker that is stopping', () => {
  let server: RedisServer;
  const apps: INestApplicationContext[] = [];
  jest.setTimeout(60_000);

  /** Ticks (heartbeat, renewals, rebalance: where a lapsed lease is taken) run by each group consumer. */
  const ticks = new Map<unknown, number>();
  beforeAll(async () => {
    server = await startRedisServer();
    const proto = GroupConsumer.prototype as unknown as { tickOnce(): Promise<void> };
    const tickOnce = proto.tickOnce;
    jest.spyOn(proto, 'tickOnce').mockImplementation(function (this: unknown) {
      ticks.set(this, (ticks.get(this) ?? 0) + 1);
      return tickOnce.call(this);
    });
  });
  afterEach(async () => {
    for (const g of world.gates.values()) g.open();
    world.gates.clear();
    world.starts = [];
    await Promise.all(apps.splice(0).map((app) => app.close()));
  });
  afterAll(async () => {
    await server.stop();
  });

  const start = async (prefix: string, partitions: number, providers: unknown[]): Promise<INestApplicationContext> => {
    const app = await createApp({ redis: server.url, prefix, partitions }, providers as never[]);
    apps.push(app);
    return app;
  };
  const owned = (app: INestApplicationContext): number => app.get(EventrailConsumers).ownership().slow?.length ?? 0;
  /**
   * Waits until `app`'s group has ticked 8 times more (a tick every third of the lease TTL: each is a
   * chance to take a lapsed lease), so the stopping member's lease has had 2.7 TTLs to lapse.
   */
  const pastLeases = async (app: INestApplicationContext): Promise<void> => {
    const group = groupConsumer(app, 'slow');
    const from = ticks.get(group) ?? 0;
    await waitFor(() => (ticks.get(group) ?? 0) >= from + 8, 'eight ticks of the other member');
  };

  it('holds through a shutdown while a handler finishes: the other member does not start that event meanwhile', async () => {
    const prefix = uniquePrefix('stoplease');
    const first = await start(prefix, 1, [First]);
    await waitFor(() => owned(first) === 1, 'the first member owns the partition');
    const second = await start(prefix, 1, [Second]);
    const release = gate('E1');
    await first.get(EventrailPublisher).publish('slow.event', { n: 'E1' });
    await waitFor(() => world.starts.includes('first:E1'), 'E1 started on the first member');

    const closing = first.close();
    apps.splice(apps.indexOf(first), 1);
    await pastLeases(second);
    const whileRunning = [...world.starts];
    release();
    await closing;
    await second.get(EventrailPublisher).publish('slow.event', { n: 'E2' });
    await waitFor(() => world.starts.includes('second:E2'), 'E2 handled by the second member');

    expect(whileRunning).toEqual(['first:E1']);
    expect(world.starts).toEqual(['first:E1', 'second:E2']);
  });

  it('holds through a hand-back while a handler finishes: the member that joined does not start that event meanwhile', async () => {
    const prefix = uniquePrefix('backlease');
    const first = await start(prefix, 2, [First]);
    await waitFor(() => owned(first) === 2, 'the first member owns both partitions');
    const releases = [gate('P0'), gate('P1')];
    const publisher = first.get(EventrailPublisher);
    await publisher.publish('slow.event', { n: 'P0' }, { partition: 0 });
    await publisher.publish('slow.event', { n: 'P1' }, { partition: 1 });
    await waitFor(() => world.starts.includes('first:P0') && world.starts.includes('first:P1'), 'both started on the first member');

    // The second member joins: the first hands one partition back, finishing its running handler first.
    const second = await start(prefix, 2, [Second]);
    await pastLeases(second);
    const whileRunning = [...world.starts].sort();
    releases.forEach((open) => open());
    await waitFor(() => owned(first) === 1 && owned(second) === 1, 'one partition each');
    await publisher.publish('slow.event', { n: 'Q0' }, { partition: 0 });
    await publisher.publish('slow.event', { n: 'Q1' }, { partition: 1 });
    await waitFor(() => world.starts.some((s) => s.endsWith(':Q0')) && world.starts.some((s) => s.endsWith(':Q1')), 'Q0 and Q1 handled');

    expect(whileRunning).toEqual(['first:P0', 'first:P1']);
    expect(world.starts.filter((s) => s.endsWith(':P0') || s.endsWith(':P1')).sort()).toEqual(['first:P0', 'first:P1']);
  });
});
