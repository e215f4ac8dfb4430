import { Injectable, Logger } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import Redis from 'ioredis';
import { Registry } from 'prom-client';
import { EventrailAdmin, EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailHealthIndicator, EventrailHealthModule } from '../../lib/health';
import { registerLagMetrics } from '../../lib/prometheus';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

/**
 * Attack on "eventrail works the same with `replyMapping: 'resp3'` (and `protocol: 2`) as with the
 * default": every surface is run once per connection setting against the same real redis-server, and
 * what it answers (or how it fails) is compared with the default's. Under 'resp3' ioredis answers map
 * replies with objects, doubles with numbers, ZRANGE WITHSCORES with [member, score] pairs, and XREAD
 * with an object keyed by stream.
 */

type Config = 'default' | 'resp3' | 'resp2' | 'given-resp3';
const CONFIGS: Array<[Config, Record<string, unknown>]> = [
  ['default', {}],
  ['resp3', { protocol: 3, replyMapping: 'resp3' }],
  ['resp2', { protocol: 2 }],
  // The application's own client under that mapping (eventrail's own connections keep 'legacy'; it reads on this one).
  ['given-resp3', { given: true, protocol: 3, replyMapping: 'resp3' }],
];

/** What the handlers saw, per config (set before each app starts). */
let current: Config = 'default';
const handled: Record<Config, number[]> = { default: [], resp3: [], resp2: [], 'given-resp3': [] };
const failing: Record<Config, number[]> = { default: [], resp3: [], resp2: [], 'given-resp3': [] };
const keyed: Record<Config, number[]> = { default: [], resp3: [], resp2: [], 'given-resp3': [] };
/** While true, `Failing` and `Keyed` throw for the messages they are told to. */
let broken = true;

@Injectable()
class Plain {
  @OnEvent('atk.plain', { group: 'plain', enableIdempotency: true, lockTtlMs: 5_000, heartbeatTtlMs: 5_000 })
  handle(message: EventrailMessage<{ n: number }>): void {
    handled[current].push(message.data.n);
  }
}

@Injectable()
class Failing {
  @OnEvent('atk.fail', { group: 'failing', ordering: 'partition', maxRetries: 1, retryBackoffMs: 5, retryBackoffMaxMs: 10 })
  handle(message: EventrailMessage<{ n: number }>): void {
    if (broken && message.data.n % 2 === 0) throw new Error(`refused ${message.data.n}`);
    failing[current].push(message.data.n);
  }
}

@Injectable()
class Keyed {
  @OnEvent('atk.keyed', {
    group: 'keyed',
    ordering: 'key',
    maxRetries: 0,
    retryBackoffMs: 5,
    redelivery: { delayMs: 600_000, maxDelayMs: 600_000 },
  })
  handle(message: EventrailMessage<{ n: number }>): void {
    if (broken && message.data.n === 1) throw new Error('parks k1');
    keyed[current].push(message.data.n);
  }
}

/** Errors and warnings eventrail logged, per config (for the failure messages). */
const logged: Record<Config, string[]> = { default: [], resp3: [], resp2: [], 'given-resp3': [] };

/** One step's outcome: its value, or how it failed. */
type Outcome = { value: unknown } | { error: string };
const outcomes: Record<Config, Record<string, Outcome>> = { default: {}, resp3: {}, resp2: {}, 'given-resp3': {} };

/** Times, ids, worker ids and stacks (a failure's call path differs between a first attempt and a retry) differ between runs: replaced by their type. */
function strip(value: unknown): unknown {
  return JSON.parse(
    JSON.stringify(value ?? null, (k, v: unknown) => {
      if (/(^|[a-z])(at|At|ms|Ms|time|Time|latency|Latency|memory|Memory|used|Used|seen|Seen|expires|Expires|heartbeat|Heartbeat)$/.test(k))
        return v === null ? null : `<${typeof v}>`;
      if (
        /^(workerId|leaseOwner|host|pid|id|eventId|offset|committed|from|to|firstId|lastId|lastOffset|firstOffset|deadLetterId|originalOffset|next|scannedTo|prefix|key|message|minId|requestedMinId|usedMemoryBytes|worker|stack)$/.test(
          k,
        )
      )
        return v === null ? null : `<${typeof v}>`;
      return v;
    }),
  );
}

const server = new URL(testRedisUrl());
const host = server.hostname;
const port = Number(server.port);

describe("eventrail under replyMapping 'resp3' and protocol 2, compared with the default", () => {
  let redis: Redis;
  const prefixes: string[] = [];

  async function step(config: Config, name: string, run: () => Promise<unknown>): Promise<void> {
    try {
      outcomes[config][name] = { value: await run() };
    } catch (error) {
      outcomes[config][name] = { error: (error as Error).message.split('\n')[0] };
    }
  }

  /** Clients given to apps as `redis` (eventrail never closes those): closed after all. */
  const givenClients: Redis[] = [];
  /** The `redis` option of a config: connection options, or a client of the application's made with them. */
  function connection(options: Record<string, unknown>): never {
    const { given, ...rest } = options;
    if (!given) return { host, port, ...rest } as never;
    const client = new Redis({ host, port, ...rest });
    givenClients.push(client);
    return client as never;
  }

  async function scenario(config: Config, options: Record<string, unknown>): Promise<void> {
    current = config;
    broken = true;
    const prefix = uniquePrefix(`resp3atk-${config}`);
    prefixes.push(prefix);
    const app = await createApp(
      {
        prefix,
        partitions: 2,
        redis: connection(options),
        autoStart: false,
        retention: { enabled: false, maxLen: 5, approximate: false, allowUnarchivedTrim: true } as never,
      },
      [Plain, Failing, Keyed],
      [TerminusModule, EventrailHealthModule],
    );
    try {
      const admin = app.get(EventrailAdmin);
      const publisher = app.get(EventrailPublisher);
      // A backlog: published before the workers start, read while behind (scripts / XRANGE).
      await publisher.publishMany([100, 101, 102, 103].map((n) => ({ event: 'atk.plain', data: { n }, key: `b${n}` })));
      await app.get(EventrailConsumers).start();
      await step(config, 'consume a backlog (published before start)', async () => {
        await waitFor(
          () => handled[config].length >= 4,
          () =>
            `${config}: 4 backlog entries handled, saw ${JSON.stringify(handled[config])}; logged: ${JSON.stringify([...new Set(logged[config])].slice(0, 4))}`,
          15_000,
        );
        return [...handled[config]].sort((a, b) => a - b);
      });
      const follow = admin.follow();
      const followed: unknown[] = [];
      const following = (async () => {
        for await (const entry of follow) {
          followed.push(entry.event);
          if (followed.length >= 3) break;
        }
      })().catch((error: Error) => {
        followed.push(`error: ${error.message}`);
      });
      // Consumers are at the tail: what they read next comes from XREAD.
      await waitFor(
        async () => (await admin.groups()).every((g) => g.partitions.every((p) => p.leaseOwner !== null)),
        `${config}: leases taken`,
        8_000,
      );

      await step(config, 'members listed (no event yet)', async () => {
        const groups = await admin.groups();
        const report = (await app.get(EventrailHealthIndicator).isHealthy('eventrail')).eventrail as {
          groups?: Record<string, { members: number }>;
        };
        return {
          groups: groups.map((g) => [g.name, g.members.length]),
          health: Object.entries(report.groups ?? {}).map(([g, h]) => [g, h.members]),
        };
      });
      await step(config, 'publish', async () => {
        const many = await publisher.publishMany(
          Array.from({ length: 8 }, (_, n) => ({ event: 'atk.plain', data: { n }, key: `k${n % 3}` })),
        );
        const one = await publisher.publish('atk.plain', { n: 8 }, { key: 'k1' });
        return [...many, one].map((r) => ({ partition: r.partition, offset: typeof r.offset, id: typeof r.id }));
      });
      await step(config, 'consume at the tail (XREAD)', async () => {
        await waitFor(
          () => handled[config].length >= 13,
          () => `${config}: 13 handled, saw ${JSON.stringify(handled[config])}`,
          15_000,
        );
        return [...handled[config]].sort((a, b) => a - b);
      });
      await step(config, 'follow', async () => {
        await waitFor(
          () => followed.length >= 3,
          () => `${config}: follow gave 3 entries, saw ${JSON.stringify(followed)}`,
          4_000,
        );
        return followed;
      });
      await step(config, 'retries and dead letters', async () => {
        await publisher.publishMany([0, 1, 2, 3].map((n) => ({ event: 'atk.fail', data: { n }, key: `f${n}` })));
        await waitFor(
          async () => (await admin.deadLetterCount('failing')) === 2 && failing[config].length === 2,
          `${config}: 2 dead letters`,
          15_000,
        );
        const letters = await admin.deadLetters('failing');
        return {
          count: await admin.deadLetterCount('failing'),
          letters: strip(letters),
          page: strip(await admin.deadLetterPage('failing', { count: 1 })),
        };
      });
      await step(config, 'parked keys', async () => {
        await publisher.publishMany([1, 2, 3].map((n) => ({ event: 'atk.keyed', data: { n }, key: n === 3 ? 'k3' : 'k1' })));
        await waitFor(
          async () => keyed[config].includes(3) && (await admin.parkedKeys('keyed')).length === 1,
          `${config}: k1 parked, k3 handled`,
          15_000,
        );
        return strip(await admin.parkedKeys('keyed'));
      });
      // The lags these steps compare move until the groups' last commits are flushed (commits are spaced): read
      // them once every group has committed what it handled (a parked key's entries count as passed).
      await step(config, 'settled', async () => {
        const lags = async (): Promise<Array<[string, number[]]>> =>
          (await admin.groups()).map((g) => [g.name, g.partitions.map((p) => p.lag)]);
        await waitFor(
          async () => (await lags()).every(([, partitions]) => partitions.every((lag) => lag === 0)),
          `${config}: every lag 0`,
          15_000,
        );
        return lags();
      });
      await step(config, 'groups / nodes / stats / lag', async () => {
        const groups = await admin.groups();
        return {
          groups: strip(groups),
          members: groups.map((g) => [g.name, g.members.length]),
          nodes: strip(await admin.nodes()),
          stats: strip(await admin.stats()),
          overview: strip(await admin.overview()),
          policies: strip(await admin.evictionPolicies()),
        };
      });
      await step(config, 'health', async () => {
        const report = (await app.get(EventrailHealthIndicator).isHealthy('eventrail')).eventrail;
        return strip(report);
      });
      await step(config, 'prometheus lag', async () => {
        const registry = new Registry();
        const metrics = registerLagMetrics(admin, { registry });
        try {
          const text = await waitFor(
            async () => {
              const t = await registry.metrics();
              return /eventrail_\w*lag\w*\{[^}]*group="plain"/.test(t) ? t : null;
            },
            `${config}: lag metrics`,
            5_000,
          );
          return text
            .split('\n')
            .filter((l) => l && !l.startsWith('#') && !/seconds|_ms|age|timestamp/i.test(l))
            .sort();
        } finally {
          metrics.stop();
        }
      });
      await step(config, 'retry parked, replay dead letters', async () => {
        broken = false;
        const retried = await admin.retryParked('keyed');
        await waitFor(
          async () => keyed[config].includes(1) && (await admin.parkedKeys('keyed')).length === 0,
          `${config}: k1 retried`,
          15_000,
        );
        const replayed = await admin.replayDeadLetters('failing', 'all');
        await waitFor(() => failing[config].length === 4, `${config}: dead letters replayed and handled`, 15_000);
        return {
          retried,
          replayed,
          keyed: [...keyed[config]].sort(),
          failing: [...failing[config]].sort(),
          left: await admin.deadLetterCount('failing'),
        };
      });
      await step(config, 'read log', async () => ({
        page: strip(await admin.readLog(0, { count: 5 } as never)),
        byTime: strip(await admin.readLog(1, { from: new Date(Date.now() - 60_000), count: 3 } as never)),
      }));
      await step(config, 'offset resets (id, time, start, end) with force', async () => {
        const first = (await admin.readLog(0, { count: 3 } as never)).entries;
        const byId = await admin.resetOffsets('plain', { id: first[1].offset } as never, { force: true });
        const before = handled[config].length;
        await waitFor(async () => handled[config].length > before, `${config}: re-handled after a reset by id`, 15_000);
        // The lag right after the first re-handled entry depends on how far the worker got: read once it is caught up.
        const caughtUp = async (): Promise<boolean> => (await admin.group('plain')).partitions.every((p) => p.lag === 0);
        await waitFor(caughtUp, `${config}: caught up again after a reset by id`, 15_000);
        const lagById = (await admin.group('plain')).partitions.map((p) => [p.lag, p.lagCapped]);
        const byTime = await admin.resetOffsets('plain', { time: new Date(Date.now() - 60_000) } as never, { force: true, dryRun: true });
        const start = await admin.resetOffsets('plain', 'start', { dryRun: true });
        const end = await admin.resetOffsets('plain', 'end', { force: true });
        return { byId: strip(byId), lagById, byTime: strip(byTime), start: strip(start), end: strip(end) };
      });
      await step(config, 'retention run', async () => strip(await admin.runRetention()));
      await step(config, 'stats after retention', async () => strip(await admin.stats()));
      follow.return?.(undefined).catch(() => undefined);
      await following;
    } finally {
      await app.close();
    }
    await step(config, 'group lifecycle (prune, delete)', async () => {
      const again = await createApp({ prefix, partitions: 2, redis: connection(options), autoStart: false });
      try {
        const admin = again.get(EventrailAdmin);
        const dropped = await admin.pruneStaleGroups({ staleMs: 0 });
        await admin.deleteGroup('keyed', { force: true }).catch((e: Error) => e.message);
        return { dropped: [...dropped].sort(), left: (await admin.groups()).map((g) => g.name) };
      } finally {
        await again.close();
      }
    });
  }

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    for (const level of ['error', 'warn'] as const)
      jest.spyOn(Logger.prototype, level).mockImplementation((...args: unknown[]) => {
        logged[current].push(`${level}: ${String(args[0]).split('\n')[0].slice(0, 300)}`);
      });
    for (const [config, options] of CONFIGS) await scenario(config, options);
  }, 300_000);

  afterAll(async () => {
    for (const prefix of prefixes) await deletePrefix(redis, prefix);
    redis.disconnect();
    for (const client of givenClients) client.disconnect();
  });

  const steps = [
    'consume a backlog (published before start)',
    'settled',
    'members listed (no event yet)',
    'publish',
    'consume at the tail (XREAD)',
    'follow',
    'retries and dead letters',
    'parked keys',
    'groups / nodes / stats / lag',
    'health',
    'prometheus lag',
    'retry parked, replay dead letters',
    'read log',
    'offset resets (id, time, start, end) with force',
    'retention run',
    'stats after retention',
    'group lifecycle (prune, delete)',
  ];
  for (const name of steps) {
    for (const config of ['resp3', 'resp2', 'given-resp3'] as const) {
      it(`${name}: ${config} answers as the default`, () => {
        expect(outcomes.default[name]).toHaveProperty('value');
        expect({ config, [name]: outcomes[config][name] }).toEqual({ config, [name]: outcomes.default[name] });
      });
    }
  }
});
