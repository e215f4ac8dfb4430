import { INestApplicationContext, Injectable, LoggerService } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { Test } from '@nestjs/testing';
import Redis from 'ioredis';
import {
  EventrailAdmin,
  EventrailConsumers,
  EventrailMessage,
  EventrailModule,
  EventrailPublisher,
  OnEvent,
  partitionForKey,
} from '../../lib';
import { EventrailHealthIndicator, EventrailHealthModule } from '../../lib/health';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

const PARTITIONS = 6;
const LOCK_TTL_MS = 900;

const handled = new Set<string>();

@Injectable()
class Mailer {
  @OnEvent('receipt.issued', { group: 'mailer', lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: LOCK_TTL_MS })
  send(message: EventrailMessage<{ n: number }>): void {
    handled.add(message.id);
  }
}

class QuietLogger implements LoggerService {
  readonly lines: string[] = [];
  log(message: unknown): void {
    this.lines.push(String(message));
  }
  error(message: unknown): void {
    this.lines.push(String(message));
  }
  warn(message: unknown): void {
    this.lines.push(String(message));
  }
}

/**
 * Holding only partitions a worker can read, attacked with three members
 * and a rebalance that happens while Redis is at maxclients, and with read
 * connections killed over and over.
 */
describe('three members at Redis maxclients', () => {
  let server: RedisServer;
  let redis: Redis;
  const apps: INestApplicationContext[] = [];

  beforeEach(async () => {
    handled.clear();
    server = await startRedisServer();
    redis = new Redis(server.url);
  });
  afterEach(async () => {
    await redis.config('SET', 'maxclients', '10000');
    for (const app of apps.splice(0)) await app.close();
    redis.disconnect();
    await server.stop();
  });

  const stat = async (section: string, name: string): Promise<number> =>
    Number(new RegExp(`${name}:(\\d+)`).exec(await redis.info(section))?.[1]);

  /** Commands Redis processed per second over `ms`, less the two INFO calls of the count itself. */
  const commandsPerSecond = async (ms: number): Promise<number> => {
    const before = await stat('stats', 'total_commands_processed');
    await new Promise((resolve) => setTimeout(resolve, ms));
    const after = await stat('stats', 'total_commands_processed');
    return ((after - before - 1) * 1000) / ms;
  };

  const boot = async (prefix: string): Promise<{ app: INestApplicationContext; logger: QuietLogger }> => {
    const logger = new QuietLogger();
    const moduleRef = await Test.createTestingModule({
      imports: [
        EventrailModule.forRoot({ redis: server.url, prefix, partitions: PARTITIONS, autoStart: false }),
        TerminusModule,
        EventrailHealthModule,
      ],
      providers: [Mailer],
    }).compile();
    moduleRef.useLogger(logger);
    const app = await moduleRef.init();
    apps.push(app);
    return { app, logger };
  };

  const keys = Array.from({ length: 60 }, (_, i) => `receipt-${i}`);
  const publish = (app: INestApplicationContext, round: number) =>
    app.get(EventrailPublisher).publishMany(keys.map((key, n) => ({ event: 'receipt.issued', key, data: { n: round * 1000 + n } })));

  const health = async (app: INestApplicationContext) =>
    (await app.get(EventrailHealthIndicator).isHealthy('eventrail')).eventrail as { status: string; message?: string };

  it('a third member joining while the room its rebalance frees is taken: every partition is read once clients leave, nothing spins meanwhile, health is honest', async () => {
    expect(new Set(keys.map((key) => partitionForKey(key, PARTITIONS))).size).toBe(PARTITIONS);
    const prefix = uniquePrefix('mc3');
    const a = await boot(prefix);
    const b = await boot(prefix);
    const c = await boot(prefix);
    await a.app.get(EventrailConsumers).start();
    await b.app.get(EventrailConsumers).start();
    await publish(a.app, 0);
    await waitFor(() => handled.size === keys.length, 'round 0 handled by two members');
    // Room for the third member's rebalance subscriber; every slot the rebalance frees (the read connections
    // the first two hand back) is taken by another client before the third member's reads can have it.
    await redis.config('SET', 'maxclients', String((await stat('clients', 'connected_clients')) + 1));
    await c.app.get(EventrailConsumers).start();
    const fillers: Redis[] = [];
    let grabbing = true;
    const grabber = (async () => {
      while (grabbing) {
        const filler = new Redis(server.url, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
        filler.on('error', () => undefined);
        const took = await filler
          .connect()
          .then(() => filler.ping().then(() => true))
          .catch(() => false);
        if (took) fillers.push(filler);
        else filler.disconnect();
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    await publish(a.app, 1);
    const admin = a.app.get(EventrailAdmin);

    // Health must be down while any partition has lag and no lease; nothing may hold a partition it cannot read.
    const waitingAt = await waitFor(
      async () => {
        const status = await admin.group('mailer');
        return status.partitions.some((p) => p.lag > 0 && !p.leaseOwner) ? status : null;
      },
      'a partition waiting with no lease while Redis is full of clients',
      10_000,
    ).catch(() => undefined);
    grabbing = false;
    await grabber;
    const table = (status: { partitions: Array<{ partition: number; leaseOwner?: string | null; lag: number }> }) =>
      JSON.stringify(status.partitions.map((p) => [p.partition, p.leaseOwner?.slice(-6) ?? null, p.lag]));
    console.log(
      `at maxclients after the third member joined (${fillers.length} fillers): ${waitingAt ? table(waitingAt) : 'no partition waited'}, ` +
        `rejected_connections ${await stat('stats', 'rejected_connections')}`,
    );
    if (waitingAt) expect((await health(a.app)).status).toBe('down');
    const rejectedBefore = await stat('stats', 'rejected_connections');
    const waitingRate = await commandsPerSecond(3_000);
    const rejectedPerSecond = ((await stat('stats', 'rejected_connections')) - rejectedBefore) / 3;
    console.log(
      `at maxclients after the join: ${waitingRate.toFixed(1)} commands/s, ${rejectedPerSecond.toFixed(1)} refused connections/s; ` +
        `connected_clients ${await stat('clients', 'connected_clients')}, leases ${table(await admin.group('mailer'))}`,
    );
    // Retrying every lockTtlMs is about one connection a second per waiting partition, not a spin.
    expect(rejectedPerSecond).toBeLessThan(PARTITIONS * 3);

    for (const filler of fillers) filler.disconnect();
    await waitFor(
      async () => (await admin.group('mailer')).lag === 0 && handled.size === 2 * keys.length,
      () => `everything read once there is room (${handled.size} of ${2 * keys.length})`,
      20_000,
    );
    await waitFor(async () => (await health(a.app)).status === 'up', 'health up once every partition is read');
    // Caught up with room: idle members wait in blocking reads; renewals and heartbeats scale with 1 / lockTtlMs.
    const idle = await commandsPerSecond(5_000);
    console.log(`commands/s, three idle members with six partitions: ${idle.toFixed(1)} (${waitingRate.toFixed(1)} at maxclients)`);
    // Twice the idle rate: a spin is hundreds of commands a second more; on a loaded host the window at
    // maxclients also took in the third member's rebalance (266.7 against 180 idle in one CI run).
    expect(waitingRate).toBeLessThan(idle * 2 + 10);
  });

  it('a read connection killed with CLIENT KILL again and again: the partition keeps being read, nothing lost or spinning', async () => {
    const prefix = uniquePrefix('mckill');
    const a = await boot(prefix);
    await a.app.get(EventrailConsumers).start();
    await publish(a.app, 99);
    await waitFor(() => handled.size === keys.length, 'a first round handled');
    handled.clear();
    const baseline = await commandsPerSecond(3_000);
    let round = 0;
    for (; round < 8; round++) {
      await publish(a.app, round);
      const readers = String(await redis.client('LIST'))
        .split('\n')
        .filter((line: string) => / cmd=xread\b/.test(line))
        .map((line) => /\bid=(\d+)/.exec(line)?.[1] as string);
      for (const id of readers) await redis.client('KILL', 'ID', id);
      await waitFor(
        () => handled.size === (round + 1) * keys.length,
        () => `round ${round} handled after its readers were killed (${handled.size} of ${(round + 1) * keys.length})`,
      );
    }
    const idle = await commandsPerSecond(3_000);
    console.log(`commands/s idle: ${baseline.toFixed(1)} before, ${idle.toFixed(1)} after ${round} rounds of CLIENT KILL of every reader`);
    expect(idle).toBeLessThan(baseline * 1.5 + 5);
    expect((await health(a.app)).status).toBe('up');
  });
});
