import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { readsWithRespReader } from '../../lib/redis/own-reply-reader';
import { RespReader } from '../../lib/redis/resp-reader';
import { partitionForKey } from '../../lib/wire/partitioner';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { seededRandom } from '../support/seeded-random';
import { SentinelSetup, startSentinelSetup } from '../support/sentinel';
import { expectEveryEventInKeyOrder, offsetsAtEnd } from '../support/drain-checks';

/**
 * The partition workers' own reply reader (own-reply-reader.ts) behind Sentinel: a failover in the
 * middle of a drain, fired while a read connection's reader holds half of a big bulk string. The
 * workers' read connections must move to the new primary and read there with `RespReader` again,
 * and every event is handled at least once by each group, in order per key, offsets at the end.
 */

const KIB = 1024;
const MIB = 1024 * KIB;
const EVENT = 'sentinel.bulk';
const GROUPS = ['alpha', 'beta'] as const;

const handlings: Array<{ group: string; key: string; n: number }> = [];
/** Called on each of group alpha's handlings (the ioredis reader's runs fire their fault from here). */
let onHandled = (): void => undefined;

@Injectable()
class Alpha {
  @OnEvent(EVENT, { group: 'alpha', lockTtlMs: 3_000, heartbeatTtlMs: 3_000 })
  handle(message: EventrailMessage<{ n: number }>): void {
    onHandled();
    handlings.push({ group: 'alpha', key: message.key ?? '', n: message.data.n });
  }
}

@Injectable()
class Beta {
  @OnEvent(EVENT, { group: 'beta', lockTtlMs: 3_000, heartbeatTtlMs: 3_000 })
  handle(message: EventrailMessage<{ n: number }>): void {
    handlings.push({ group: 'beta', key: message.key ?? '', n: message.data.n });
  }
}

interface Produced {
  key: string;
  n: number;
  partition: number;
}

/** A JSON value about `bytes` long with raw CR/LF whitespace and RESP look-alikes in a string, carrying `n`. */
function payload(n: number, bytes: number): string {
  const noise = '\r\n$-1\r\n*3\r\n:12\r\n+OK\r\n-ERR x\r\n';
  const body = noise.repeat(Math.ceil(bytes / noise.length)).slice(0, Math.max(0, bytes - 40));
  return `{\r\n"n":${n},\r\n"blob":${JSON.stringify(body)}}`;
}

/** Appends `total` entries by raw XADD, keyed, `n` counting per key from `next`; a share of them over 64 KiB and over 1 MiB. */
async function produce(
  redis: Redis,
  keys: EventrailKeys,
  partitions: number,
  seed: number,
  total: number,
  next: Map<string, number>,
): Promise<Produced[]> {
  const random = seededRandom(seed);
  const produced: Produced[] = [];
  for (let i = 0; i < total; i++) {
    const key = `k${Math.floor(random() * 10)}\r\n`;
    const n = (next.get(key) ?? 0) + 1;
    next.set(key, n);
    const roll = random();
    const bytes =
      roll < 0.1 ? MIB + 100 * KIB : roll < 0.35 ? 70 * KIB + Math.floor(random() * 30 * KIB) : 100 + Math.floor(random() * 300);
    const partition = partitionForKey(key, partitions);
    await redis.xadd(keys.stream(partition), '*', 'event', EVENT, 'key', key, 'data', payload(n, bytes));
    produced.push({ key, n, partition });
  }
  return produced;
}

interface ReadyOn {
  /** `host:port` the read connection's socket reached. */
  node: string;
  own: boolean;
}

afterEach(() => {
  handlings.length = 0;
  jest.restoreAllMocks();
});

describe.each([
  ['SENTINEL FAILOVER', 'asked', 'own'],
  ['SIGKILL of the primary', 'killed', 'own'],
  ['SENTINEL FAILOVER', 'asked', 'ioredis'],
] as const)('%s in the middle of a drain (%s, %s reader)', (_label, how, reader) => {
  let setup: SentinelSetup;
  const saved = process.env.EVENTRAIL_REPLY_READER;

  beforeAll(async () => {
    if (reader === 'ioredis') process.env.EVENTRAIL_REPLY_READER = 'ioredis';
    else delete process.env.EVENTRAIL_REPLY_READER;
    setup = await startSentinelSetup(1);
  });
  afterAll(async () => {
    if (saved === undefined) delete process.env.EVENTRAIL_REPLY_READER;
    else process.env.EVENTRAIL_REPLY_READER = saved;
    await setup?.stop();
  });

  it(`read connections follow the new primary and read there with ${reader === 'own' ? 'RespReader' : "ioredis's decoder"}; every event handled, per-key order, offsets at the end`, async () => {
    const partitions = 3;
    const prefix = uniquePrefix('own-sentinel');
    const keys = new EventrailKeys(prefix, partitions);
    const sentinelOptions = { sentinels: setup.sentinels, name: setup.name };
    // A client of the test's own that follows the primary as the app does.
    const redis = new Redis({ ...sentinelOptions, reconnectOnError: (e: Error) => (e.message.startsWith('READONLY') ? 2 : false) });
    redis.on('error', () => undefined);

    const readies: ReadyOn[] = [];
    const readConnections: Redis[] = [];
    const duplicate = EventrailRedis.prototype.duplicateForReads;
    jest.spyOn(EventrailRedis.prototype, 'duplicateForReads').mockImplementation(function (this: EventrailRedis) {
      const connection = duplicate.call(this) as Redis;
      readConnections.push(connection);
      connection.on('ready', () => {
        const stream = (connection as unknown as { stream?: { remoteAddress?: string; remotePort?: number } }).stream;
        readies.push({ node: `${stream?.remoteAddress ?? '?'}:${stream?.remotePort ?? '?'}`, own: readsWithRespReader(connection) });
      });
      return connection;
    });

    let readBytes = 0;
    let bytesAfterSwitch = 0;
    let switched = false;
    let fired: Promise<void> | undefined;
    const fire = (): Promise<void> =>
      how === 'asked'
        ? setup.failover()
        : Promise.resolve().then(() => {
            const victim = setup.nodes.find((n) => setup.addressOf(n) === firstPrimary);
            if (!victim) throw new Error(`no node at ${firstPrimary}`);
            process.kill(victim.pid, 'SIGKILL');
          });
    const original = RespReader.prototype.write;
    jest.spyOn(RespReader.prototype, 'write').mockImplementation(function (this: RespReader, chunk: Buffer) {
      readBytes += chunk.length;
      if (switched) bytesAfterSwitch += chunk.length;
      original.call(this, chunk);
      const cut = (this as unknown as { partialBulk?: { length: number } }).partialBulk;
      if (!fired && cut && cut.length > 64 * KIB) fired = fire();
    });

    // ioredis's decoder has no spy to fire from: the failover fires at alpha's 30th handling.
    if (reader === 'ioredis') onHandled = () => void (handlings.length >= 30 && !fired && (fired = fire()));
    const firstPrimary = await setup.primary();
    const next = new Map<string, number>();
    const before = await produce(redis, keys, partitions, 11, 120, next);
    // Every entry on the replica before the failover: a failover may lose writes not yet replicated.
    expect(await redis.wait(1, 10_000)).toBe(1);

    const app: INestApplicationContext = await createApp(
      { redis: { sentinel: sentinelOptions }, prefix, partitions, maxPayloadBytes: 4 * MIB, autoStart: false },
      [Alpha, Beta],
    );
    try {
      expect(app.get(EventrailPublisher)).toBeDefined();
      await app.get(EventrailConsumers).start();
      await waitFor(
        () => fired !== undefined,
        () =>
          `a reader half-way through a bulk string over 64 KiB (the failover fired then); ${readBytes} bytes read, ` +
          `${handlings.length} handlings, readies ${JSON.stringify(readies)}`,
        30_000,
        20,
      );
      await fired;
      const promoted = await waitFor(
        async () => {
          const now = await setup.primary();
          return now !== firstPrimary && now !== 'unknown' ? now : undefined;
        },
        'the sentinels to name a new primary',
        45_000,
        50,
      );
      // The old primary demoted (a write there in between would be lost), then the new one the test's client writes to.
      const role = async (address: string): Promise<string | undefined> => {
        const [host, port] = address.split(':');
        const node = new Redis(Number(port), host, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
        node.on('error', () => undefined);
        try {
          await node.connect();
          return String(((await node.call('ROLE')) as unknown[])[0]);
        } catch {
          return undefined;
        } finally {
          node.disconnect();
        }
      };
      if (how === 'asked') await waitFor(async () => (await role(firstPrimary)) === 'slave', 'the old primary demoted', 30_000, 50);
      expect(await role(promoted)).toBe('master');
      const [host, port] = promoted.split(':');
      const direct = new Redis(Number(port), host);
      switched = true;
      // More events, appended on the new primary while the workers read there.
      const after = await produce(direct, keys, partitions, 12, 60, next).finally(() => direct.disconnect());
      const state = async (): Promise<string> => {
        const node = new Redis(Number(port), host);
        try {
          const lines: string[] = [];
          for (let p = 0; p < partitions; p++) {
            const last = (await node.xrevrange(keys.stream(p), '+', '-', 'COUNT', 1))[0]?.[0];
            const offsets = await Promise.all(GROUPS.map((g) => node.get(keys.offset(g, p))));
            lines.push(`p${p} last ${last} offsets ${offsets.join(',')}`);
          }
          return lines.join('; ');
        } finally {
          node.disconnect();
        }
      };
      const lastState = { text: '' };
      await waitFor(
        async () => {
          lastState.text = await state();
          return offsetsAtEnd(redis, keys, GROUPS, partitions).catch(() => false);
        },
        () =>
          `offsets at each partition's end on ${promoted} (${handlings.length} handlings, ${lastState.text}, ` +
          `read connections ${readConnections.map((c) => c.status).join(',')}, readies ${JSON.stringify(readies)})`,
        40_000,
        100,
      );
      expectEveryEventInKeyOrder(GROUPS, [...before, ...after], handlings);

      if (reader === 'ioredis') {
        expect(readies.filter((r) => r.own)).toEqual([]);
        expect(readBytes).toBe(0);
        return;
      }
      const onNew = readies.filter((r) => r.node === promoted);
      expect(onNew.length).toBeGreaterThan(0);
      // Every read connection that became ready on the new primary reads with RespReader.
      expect(onNew.filter((r) => !r.own)).toEqual([]);
      // And the read connections there now are read by it.
      const live = readConnections.filter((c) => c.status === 'ready');
      expect(live.length).toBeGreaterThan(0);
      expect(live.map((c) => readsWithRespReader(c))).toEqual(live.map(() => true));
      expect(bytesAfterSwitch).toBeGreaterThan(MIB);
      expect(readBytes).toBeGreaterThan(4 * MIB);
    } finally {
      onHandled = () => undefined;
      await app.close();
      redis.disconnect();
    }
  });
});
