import { Injectable } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, eventrailAclRules, EventrailMessage, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { readsWithRespReader } from '../../lib/redis/own-reply-reader';
import { RespReader } from '../../lib/redis/resp-reader';
import { partitionForKey } from '../../lib/wire/partitioner';
import { aclLog, createAclUser } from '../support/acl';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';
import { expectEveryEventInKeyOrder, offsetsAtEnd } from '../support/drain-checks';

/**
 * The partition workers' own reply reader (own-reply-reader.ts) over a consumer's lifecycle: the
 * handshake's AUTH of an ACL user with only eventrail's rules, an app closed while a big read is half
 * received and a new one started on the same groups, and ioredis's `commandTimeout` while Redis is
 * paused, compared with `EVENTRAIL_REPLY_READER=ioredis`.
 */

const KIB = 1024;
const MIB = 1024 * KIB;
const EVENT = 'lifecycle.bulk';
const GROUPS = ['alpha', 'beta'] as const;

/** Which app (1, 2, ...) handles now: each handling is tagged with it. */
let generation = 1;
const handlings: Array<{ group: string; key: string; n: number; generation: number }> = [];

@Injectable()
class Alpha {
  @OnEvent(EVENT, 'alpha')
  handle(message: EventrailMessage<{ n: number }>): void {
    handlings.push({ group: 'alpha', key: message.key ?? '', n: message.data.n, generation });
  }
}

@Injectable()
class Beta {
  @OnEvent(EVENT, 'beta')
  handle(message: EventrailMessage<{ n: number }>): void {
    handlings.push({ group: 'beta', key: message.key ?? '', n: message.data.n, generation });
  }
}

interface Produced {
  key: string;
  n: number;
}

function payload(n: number, bytes: number): string {
  const noise = '\r\n$-1\r\n*3\r\n:12\r\n+OK\r\n-ERR x\r\n';
  const body = noise.repeat(Math.ceil(bytes / noise.length)).slice(0, Math.max(0, bytes - 40));
  return `{\r\n"n":${n},\r\n"blob":${JSON.stringify(body)}}`;
}

/** `total` keyed entries by raw XADD, some over 64 KiB and over 1 MiB, `n` counting per key. */
async function produce(
  redis: Redis,
  keys: EventrailKeys,
  partitions: number,
  seed: number,
  total: number,
  bigShare = 0.1,
): Promise<Produced[]> {
  const random = seededRandom(seed);
  const next = new Map<string, number>();
  const produced: Produced[] = [];
  for (let i = 0; i < total; i++) {
    const key = `k${Math.floor(random() * 10)}\r\n`;
    const n = (next.get(key) ?? 0) + 1;
    next.set(key, n);
    const roll = random();
    const bytes =
      roll < bigShare
        ? MIB + 100 * KIB
        : roll < bigShare + 0.25
          ? 70 * KIB + Math.floor(random() * 30 * KIB)
          : 100 + Math.floor(random() * 300);
    await redis.xadd(keys.stream(partitionForKey(key, partitions)), '*', 'event', EVENT, 'key', key, 'data', payload(n, bytes));
    produced.push({ key, n });
  }
  return produced;
}

/** Records each read connection the workers open, and whether `RespReader` reads it at each `ready`. */
function watchReadConnections(): { connections: Redis[]; readies: boolean[] } {
  const seen = { connections: [] as Redis[], readies: [] as boolean[] };
  const duplicate = EventrailRedis.prototype.duplicateForReads;
  jest.spyOn(EventrailRedis.prototype, 'duplicateForReads').mockImplementation(function (this: EventrailRedis) {
    const connection = duplicate.call(this) as Redis;
    seen.connections.push(connection);
    connection.on('ready', () => void seen.readies.push(readsWithRespReader(connection)));
    return connection;
  });
  return seen;
}

afterEach(() => {
  handlings.length = 0;
  generation = 1;
  jest.restoreAllMocks();
});

describe('an ACL user with only eventrail’s rules: the read connections’ AUTH, then a drain', () => {
  let server: RedisServer;
  let root: Redis;

  beforeAll(async () => {
    server = await startRedisServer();
    root = new Redis(server.url);
  });
  afterAll(async () => {
    root?.disconnect();
    await server?.stop();
  });

  it.each([
    ['full + optional', true],
    ['full only (INFO refused: no ready check)', false],
  ])(
    '%s: every read connection authenticates and reads with RespReader; every event handled, in order, offsets at the end',
    async (_label, optional) => {
      const partitions = 3;
      const prefix = uniquePrefix('own-acl');
      const keys = new EventrailKeys(prefix, partitions);
      const rules = eventrailAclRules(prefix);
      const user = `er-${optional ? 'opt' : 'min'}`;
      await createAclUser(root, user, 'pw\r\nsecret', optional ? `${rules.full} ${rules.optional}` : rules.full);
      await root.call('ACL', 'LOG', 'RESET');
      const seen = watchReadConnections();
      let readBytes = 0;
      const original = RespReader.prototype.write;
      jest.spyOn(RespReader.prototype, 'write').mockImplementation(function (this: RespReader, chunk: Buffer) {
        readBytes += chunk.length;
        original.call(this, chunk);
      });
      const produced = await produce(root, keys, partitions, 21, 80);
      const app = await createApp(
        {
          redis: { host: '127.0.0.1', port: server.port, username: user, password: 'pw\r\nsecret' },
          prefix,
          partitions,
          maxPayloadBytes: 4 * MIB,
          autoStart: false,
        },
        [Alpha, Beta],
      );
      try {
        await app.get(EventrailConsumers).start();
        await waitFor(
          () => offsetsAtEnd(root, keys, GROUPS, partitions),
          () => `offsets at the end (${handlings.length} handlings)`,
          40_000,
          100,
        );
        expectEveryEventInKeyOrder(GROUPS, produced, handlings);
        expect(seen.readies.length).toBeGreaterThan(0);
        expect(seen.readies.filter((own) => !own)).toEqual([]);
        expect(readBytes).toBeGreaterThan(2 * MIB);
        // Each read connection is authenticated as the user.
        const clients = String(await root.client('LIST'));
        const ports = seen.connections.map((c) => (c as unknown as { stream?: { localPort?: number } }).stream?.localPort).filter(Boolean);
        for (const port of ports) expect(clients).toMatch(new RegExp(`addr=127\\.0\\.0\\.1:${port} .*user=${user} `));
        // Nothing of what eventrail sent was denied (the optional commands aside, when the user lacks them).
        const denied = (await aclLog(root, user)).filter(
          (entry) => optional || !['info', 'role', 'config|get', 'wait'].includes(entry.object),
        );
        expect(denied).toEqual([]);
      } finally {
        await app.close();
      }
    },
  );
});

describe('an app closed while a big read is half received, then a new app on the same groups', () => {
  let server: RedisServer;
  let redis: Redis;

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it.each([1, 2, 3])('run %i: nothing lost, nothing out of order, no handling by the closed app after its close', async (seed) => {
    const partitions = 3;
    const prefix = uniquePrefix('own-close');
    const keys = new EventrailKeys(prefix, partitions);
    const options = { redis: server.url, prefix, partitions, maxPayloadBytes: 4 * MIB, autoStart: false, consumer: { lockTtlMs: 3_000 } };
    const produced = await produce(redis, keys, partitions, 30 + seed, 100, 0.15);
    const seen = watchReadConnections();
    let closing: Promise<void> | undefined;
    let cutAt = 0;
    const first = await createApp(options, [Alpha, Beta]);
    const original = RespReader.prototype.write;
    jest.spyOn(RespReader.prototype, 'write').mockImplementation(function (this: RespReader, chunk: Buffer) {
      original.call(this, chunk);
      const cut = (this as unknown as { partialBulk?: { length: number } }).partialBulk;
      // Not on the first big reply: some handlings done, some offsets committed.
      if (!closing && cut && cut.length > 64 * KIB && handlings.length >= 10 * seed) {
        cutAt = handlings.length;
        closing = first.close();
      }
    });
    try {
      await first.get(EventrailConsumers).start();
      await waitFor(
        () => closing !== undefined,
        () => `a read half received after ${10 * seed} handlings (${handlings.length} so far)`,
        30_000,
        20,
      );
      await closing;
    } catch (error) {
      if (!closing) await first.close();
      throw error;
    }
    const byFirst = handlings.length;
    expect(byFirst).toBeGreaterThanOrEqual(cutAt);
    // Closed with work left: the test proves something only if the second app has some to do.
    expect(await offsetsAtEnd(redis, keys, GROUPS, partitions)).toBe(false);
    // A disconnected socket ends on its 'close' event, after close() returned; one opened after the close would never end.
    await waitFor(
      () => seen.connections.every((c) => c.status === 'end'),
      () => `every read connection of the closed app ended (${seen.connections.map((c) => c.status).join(', ')})`,
      5_000,
    );

    generation = 2;
    const second = await createApp(options, [Alpha, Beta]);
    try {
      await second.get(EventrailConsumers).start();
      await waitFor(
        () => offsetsAtEnd(redis, keys, GROUPS, partitions),
        () => `offsets at the end (${handlings.length} handlings)`,
        40_000,
        100,
      );
      expectEveryEventInKeyOrder(GROUPS, produced, handlings);
      // The first app handled nothing after its close resolved.
      expect(handlings.filter((h) => h.generation === 1).length).toBe(byFirst);
      expect(handlings.some((h) => h.generation === 2)).toBe(true);
    } finally {
      await second.close();
    }
  });
});

describe.each(['own', 'ioredis'] as const)('commandTimeout on a read connection while Redis is paused (%s reader)', (reader) => {
  let server: RedisServer;
  let admin: Redis;
  const saved = process.env.EVENTRAIL_REPLY_READER;
  const outcomes: Record<string, unknown> = {};

  beforeAll(async () => {
    if (reader === 'ioredis') process.env.EVENTRAIL_REPLY_READER = 'ioredis';
    else delete process.env.EVENTRAIL_REPLY_READER;
    server = await startRedisServer();
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    if (saved === undefined) delete process.env.EVENTRAIL_REPLY_READER;
    else process.env.EVENTRAIL_REPLY_READER = saved;
    admin?.disconnect();
    await server?.stop();
  });

  it('the paused commands time out as ioredis times them out; the replies after them answer the right commands', async () => {
    const prefix = uniquePrefix('own-timeout');
    const app = await createApp({ redis: { host: '127.0.0.1', port: server.port, commandTimeout: 400 }, prefix, autoStart: false });
    try {
      const redis = app.get(EventrailRedis);
      const stream = redis.keys.stream(0);
      for (let i = 1; i <= 4; i++) await admin.xadd(stream, `${i}-1`, 'event', EVENT, 'data', payload(i, 600 * KIB));
      const connection = redis.duplicateForReads() as Redis;
      await connection.ping();
      expect(readsWithRespReader(connection)).toBe(reader === 'own');
      const ids = (reply: unknown): string[] =>
        ((reply as Array<[Buffer, Array<[Buffer, Buffer[]]>]> | null)?.[0]?.[1] ?? []).map(
          ([id, fields]) => `${String(id)}:${fields.length}`,
        );
      await admin.client('PAUSE', 1_500, 'ALL');
      const paused = await Promise.allSettled([
        connection.xreadBuffer('COUNT', 4, 'STREAMS', stream, '0'),
        connection.ping('one'),
        connection.get(`${prefix}:missing`),
      ]);
      const during = paused.map((s) => (s.status === 'fulfilled' ? { value: String(s.value) } : { error: (s.reason as Error).message }));
      // Redis answers once the pause ends: the timed-out commands' replies arrive first and must be taken as theirs.
      await waitFor(
        () => connection.ping('back').then((pong) => String(pong) === 'back'),
        'the connection answering after the pause',
        10_000,
        50,
      );
      // The 400 ms was for the pause. What follows checks which reply answers which command, and 1.8 MB of
      // replies can take longer than that on a loaded host (CI saw "Command timed out" here); ioredis reads the
      // option for each command it sends.
      connection.options.commandTimeout = 30_000;
      const after = await Promise.all([
        connection.xreadBuffer('COUNT', 2, 'STREAMS', stream, '2-1').then(ids),
        connection.ping('two').then(String),
        connection.xreadBuffer('COUNT', 1, 'STREAMS', stream, '0').then(ids),
        connection.get(`${prefix}:missing`),
      ]);
      connection.disconnect();
      outcomes[reader] = { during, after };
      expect(during).toEqual([{ error: 'Command timed out' }, { error: 'Command timed out' }, { error: 'Command timed out' }]);
      expect(after).toEqual([['3-1:4', '4-1:4'], 'two', ['1-1:4'], null]);
    } finally {
      await app.close();
    }
  });

  it('a drain with CLIENT PAUSE longer than commandTimeout in the middle of replies: every event handled, in order, offsets at the end', async () => {
    const partitions = 2;
    const prefix = uniquePrefix('own-timeout-drain');
    const keys = new EventrailKeys(prefix, partitions);
    const produced = await produce(admin, keys, partitions, 41, 60);
    const seen = watchReadConnections();
    let pauses = 0;
    let pausing = false;
    let started = false;
    const original = RespReader.prototype.write;
    jest.spyOn(RespReader.prototype, 'write').mockImplementation(function (this: RespReader, chunk: Buffer) {
      original.call(this, chunk);
      const cut = (this as unknown as { partialBulk?: { length: number } }).partialBulk;
      if (started && cut && cut.length > 64 * KIB && !pausing && pauses < 3) {
        pausing = true;
        pauses++;
        void admin.client('PAUSE', 1_200, 'ALL').finally(() => (pausing = false));
      }
    });
    // ioredis's decoder has no spy: its run pauses Redis on handlings instead.
    const pauser =
      reader === 'ioredis'
        ? setInterval(() => {
            if (started && handlings.length > 0 && !pausing && pauses < 3) {
              pausing = true;
              pauses++;
              void admin.client('PAUSE', 1_200, 'ALL').finally(() => (pausing = false));
            }
          }, 50)
        : undefined;
    const app = await createApp(
      {
        redis: { host: '127.0.0.1', port: server.port, commandTimeout: 800 },
        prefix,
        partitions,
        maxPayloadBytes: 4 * MIB,
        autoStart: false,
      },
      [Alpha, Beta],
    );
    try {
      started = true;
      await app.get(EventrailConsumers).start();
      await waitFor(
        () => offsetsAtEnd(admin, keys, GROUPS, partitions),
        () => `offsets at the end (${handlings.length} handlings, ${pauses} pauses)`,
        50_000,
        100,
      );
      expectEveryEventInKeyOrder(GROUPS, produced, handlings);
      expect(pauses).toBeGreaterThanOrEqual(1);
      expect(seen.readies.every((own) => own === (reader === 'own'))).toBe(true);
    } finally {
      if (pauser) clearInterval(pauser);
      await app.close();
    }
  });
});

describe.each(['own', 'ioredis'] as const)(
  'an ACL user’s password rotated away and back in the middle of a drain (%s reader)',
  (reader) => {
    let server: RedisServer;
    let root: Redis;
    const saved = process.env.EVENTRAIL_REPLY_READER;

    beforeAll(async () => {
      if (reader === 'ioredis') process.env.EVENTRAIL_REPLY_READER = 'ioredis';
      else delete process.env.EVENTRAIL_REPLY_READER;
      server = await startRedisServer();
      root = new Redis(server.url);
    });
    afterAll(async () => {
      if (saved === undefined) delete process.env.EVENTRAIL_REPLY_READER;
      else process.env.EVENTRAIL_REPLY_READER = saved;
      root?.disconnect();
      await server?.stop();
    });

    it('reconnects refused with WRONGPASS while the password is gone, then every event handled, in order, offsets at the end', async () => {
      const partitions = 2;
      const prefix = uniquePrefix('own-rotate');
      const keys = new EventrailKeys(prefix, partitions);
      const rules = eventrailAclRules(prefix);
      const user = 'er-rotate';
      await createAclUser(root, user, 'first', `${rules.full} ${rules.optional}`);
      await root.call('ACL', 'LOG', 'RESET');
      const produced = await produce(root, keys, partitions, 51, 70);
      const seen = watchReadConnections();
      let rotated: Promise<void> | undefined;
      const rotate = (): Promise<void> =>
        (async () => {
          await root.call('ACL', 'SETUSER', user, 'resetpass', '>second');
          await root.call('CLIENT', 'KILL', 'USER', user);
          // Some reconnect refused (ACL LOG counts failed AUTHs), then the password back.
          await waitFor(async () => (await aclLog(root, user)).some((e) => e.reason === 'auth'), 'a refused AUTH', 20_000, 20);
          await root.call('ACL', 'SETUSER', user, 'resetpass', '>first');
        })();
      const original = RespReader.prototype.write;
      let started = false;
      jest.spyOn(RespReader.prototype, 'write').mockImplementation(function (this: RespReader, chunk: Buffer) {
        original.call(this, chunk);
        const cut = (this as unknown as { partialBulk?: { length: number } }).partialBulk;
        if (started && !rotated && cut && cut.length > 64 * KIB && handlings.length >= 10) rotated = rotate();
      });
      const ticker =
        reader === 'ioredis'
          ? setInterval(() => void (started && !rotated && handlings.length >= 10 && (rotated = rotate())), 5)
          : undefined;
      const app = await createApp(
        {
          redis: { host: '127.0.0.1', port: server.port, username: user, password: 'first' },
          prefix,
          partitions,
          maxPayloadBytes: 4 * MIB,
          autoStart: false,
        },
        [Alpha, Beta],
      );
      try {
        started = true;
        await app.get(EventrailConsumers).start();
        await waitFor(
          () => rotated !== undefined,
          () => `the rotation fired (${handlings.length} handlings)`,
          30_000,
          20,
        );
        await rotated;
        await waitFor(
          () => offsetsAtEnd(root, keys, GROUPS, partitions),
          () => `offsets at the end (${handlings.length} handlings)`,
          45_000,
          100,
        );
        expectEveryEventInKeyOrder(GROUPS, produced, handlings);
        // Read connections reconnected (more readies than connections) and read as before.
        expect(seen.readies.length).toBeGreaterThan(seen.connections.length);
        expect(seen.readies.every((own) => own === (reader === 'own'))).toBe(true);
      } finally {
        if (ticker) clearInterval(ticker);
        await app.close();
      }
    });
  },
);

describe('a read connection on db 5 (SELECT in the handshake), killed in the middle of replies', () => {
  let server: RedisServer;
  let root: Redis;

  beforeAll(async () => {
    server = await startRedisServer();
    root = new Redis(`${server.url}/5`);
  });
  afterAll(async () => {
    root?.disconnect();
    await server?.stop();
  });

  it('reconnects to db 5 and reads there with RespReader: every event handled, in order, offsets at the end; nothing written to db 0', async () => {
    const partitions = 2;
    const prefix = uniquePrefix('own-db');
    const keys = new EventrailKeys(prefix, partitions);
    const produced = await produce(root, keys, partitions, 61, 80);
    const seen = watchReadConnections();
    let kills = 0;
    let killing = false;
    let started = false;
    const original = RespReader.prototype.write;
    jest.spyOn(RespReader.prototype, 'write').mockImplementation(function (this: RespReader, chunk: Buffer) {
      original.call(this, chunk);
      const cut = (this as unknown as { partialBulk?: { length: number } }).partialBulk;
      if (started && cut && cut.length > 64 * KIB && !killing && kills < 4) {
        killing = true;
        kills++;
        void (async () => {
          for (const c of seen.connections) {
            const port = (c as unknown as { stream?: { localPort?: number } }).stream?.localPort;
            if (c.status === 'ready' && port) await root.client('KILL', 'ADDR', `127.0.0.1:${port}`).catch(() => undefined);
          }
        })().finally(() => (killing = false));
      }
    });
    const app = await createApp(
      { redis: { host: '127.0.0.1', port: server.port, db: 5 }, prefix, partitions, maxPayloadBytes: 4 * MIB, autoStart: false },
      [Alpha, Beta],
    );
    try {
      started = true;
      await app.get(EventrailConsumers).start();
      await waitFor(
        () => offsetsAtEnd(root, keys, GROUPS, partitions),
        () => `offsets at the end (${handlings.length} handlings, ${kills} kills)`,
        45_000,
        100,
      );
      expectEveryEventInKeyOrder(GROUPS, produced, handlings);
      expect(kills).toBeGreaterThanOrEqual(2);
      expect(seen.readies.length).toBeGreaterThan(seen.connections.length);
      expect(seen.readies.every(Boolean)).toBe(true);
      const db0 = new Redis(server.url);
      try {
        expect(await db0.keys(`*${prefix}*`)).toEqual([]);
      } finally {
        db0.disconnect();
      }
    } finally {
      await app.close();
    }
  });
});

describe.each(['own', 'ioredis'] as const)('socketTimeout on a read connection while Redis is paused (%s reader)', (reader) => {
  let server: RedisServer;
  let admin: Redis;
  const saved = process.env.EVENTRAIL_REPLY_READER;

  beforeAll(async () => {
    if (reader === 'ioredis') process.env.EVENTRAIL_REPLY_READER = 'ioredis';
    else delete process.env.EVENTRAIL_REPLY_READER;
    server = await startRedisServer();
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    if (saved === undefined) delete process.env.EVENTRAIL_REPLY_READER;
    else process.env.EVENTRAIL_REPLY_READER = saved;
    admin?.disconnect();
    await server?.stop();
  });

  it('the socket is destroyed as ioredis destroys it, the commands resent on the new socket answer right', async () => {
    const prefix = uniquePrefix('own-socket-timeout');
    const app = await createApp({ redis: { host: '127.0.0.1', port: server.port, socketTimeout: 300 }, prefix, autoStart: false });
    try {
      const redis = app.get(EventrailRedis);
      const stream = redis.keys.stream(0);
      for (let i = 1; i <= 3; i++) await admin.xadd(stream, `${i}-1`, 'event', EVENT, 'data', payload(i, 500 * KIB));
      const connection = redis.duplicateForReads() as Redis;
      let closes = 0;
      connection.on('close', () => void closes++);
      await connection.ping();
      expect(readsWithRespReader(connection)).toBe(reader === 'own');
      const ids = (reply: unknown): string[] =>
        ((reply as Array<[Buffer, Array<[Buffer, Buffer[]]>]> | null)?.[0]?.[1] ?? []).map(
          ([id, fields]) => `${String(id)}:${fields.length}`,
        );
      await admin.client('PAUSE', 1_000, 'ALL');
      const settled = await Promise.allSettled([
        connection.xreadBuffer('COUNT', 3, 'STREAMS', stream, '0').then(ids),
        connection.ping('one').then(String),
        connection.xreadBuffer('COUNT', 1, 'STREAMS', stream, '1-1').then(ids),
      ]);
      const outcomes = settled.map((s) => (s.status === 'fulfilled' ? { value: s.value } : { error: (s.reason as Error).message }));
      expect(closes).toBeGreaterThanOrEqual(1);
      expect(outcomes).toEqual([{ value: ['1-1:4', '2-1:4', '3-1:4'] }, { value: 'one' }, { value: ['2-1:4'] }]);
      expect(readsWithRespReader(connection)).toBe(reader === 'own');
      connection.disconnect();
    } finally {
      await app.close();
    }
  });
});
