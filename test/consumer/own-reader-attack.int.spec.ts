import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis, { ReplyError } from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { readsWithRespReader } from '../../lib/redis/own-reply-reader';
import { RespReader } from '../../lib/redis/resp-reader';
import { partitionForKey } from '../../lib/wire/partitioner';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { freePort, RedisServer, startRedisServer, waitUntilAnswers } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';
import { expectEveryEventInKeyOrder, offsetsAtEnd } from '../support/drain-checks';

/**
 * Attacks on the partition workers' own reply reader (own-reply-reader.ts, commit 265dc8b): a worker's
 * reads must behave exactly as through ioredis's decoder, under any fault. Each drain proves the own
 * reader was in the path (a spy on `RespReader.prototype.write`, and `readsWithRespReader` on the
 * workers' read connections), then judges outcomes only: every event handled at least once by every
 * group, per-key order, and each group's committed offset at the partition's last entry.
 */

const KIB = 1024;
const MIB = 1024 * KIB;
const EVENT = 'attack.bulk';
const GROUPS = ['alpha', 'beta'] as const;

interface Handling {
  group: string;
  key: string;
  n: number;
  partition: number;
  offset: string;
}

const handlings: Handling[] = [];

const record = (group: string, message: EventrailMessage<{ n: number }>): void =>
  void handlings.push({ group, key: message.key ?? '', n: message.data.n, partition: message.partition, offset: message.offset });

@Injectable()
class Alpha {
  @OnEvent(EVENT, 'alpha')
  handle(message: EventrailMessage<{ n: number }>): void {
    record('alpha', message);
  }
}

@Injectable()
class Beta {
  @OnEvent(EVENT, 'beta')
  handle(message: EventrailMessage<{ n: number }>): void {
    record('beta', message);
  }
}

/** Bytes a reply's bulk strings are made of: CR and LF runs and RESP look-alikes. */
const NOISE = '\r\n$-1\r\n*3\r\n:12\r\n+OK\r\n-ERR x\r\n\r\r\n\n%2\r\n>3\r\n';

/** A JSON value whose whitespace is raw CR/LF runs (valid JSON), about `bytes` long, carrying `n`. */
function crlfJson(n: number, bytes: number): string {
  const pad = Math.max(0, bytes - 40);
  // Raw CR/LF between tokens, and escaped ones inside the string: both kinds of bytes reach the reader.
  const ws = '\r\n'.repeat(Math.min(64, Math.floor(pad / 4)));
  const body = NOISE.repeat(Math.ceil(pad / NOISE.length)).slice(0, Math.max(0, pad - ws.length * 2));
  return `{${ws}"n":${n},${ws}"blob":${JSON.stringify(body)}}`;
}

interface Produced {
  key: string;
  n: number;
  partition: number;
}

/**
 * A backlog over `partitions`: keys full of CR/LF, entries small, over 64 KiB and over 1 MiB, half
 * appended by eventrail's publisher (big ones indexed), half by a raw XADD as a producer in another
 * language would (big ones not indexed: the byte-counting script reads them). Per key, in order.
 */
async function produce(
  app: INestApplicationContext | undefined,
  redis: Redis,
  keys: EventrailKeys,
  partitions: number,
  seed: number,
  total: number,
  shares = { big: 0.08, medium: 0.15 },
): Promise<Produced[]> {
  const random = seededRandom(seed);
  const publisher = app?.get(EventrailPublisher);
  const keyNames = Array.from({ length: 12 }, (_, k) => `k${k}\r\n$-1\r\n${'\n'.repeat(k % 3)}`);
  const next = new Map<string, number>();
  const produced: Produced[] = [];
  for (let i = 0; i < total; i++) {
    const key = keyNames[Math.floor(random() * keyNames.length)];
    const n = (next.get(key) ?? 0) + 1;
    next.set(key, n);
    const roll = random();
    const bytes =
      roll < shares.big
        ? MIB + 200 * KIB
        : roll < shares.big + shares.medium
          ? 70 * KIB + Math.floor(random() * 30 * KIB)
          : 50 + Math.floor(random() * 400);
    const partition = partitionForKey(key, partitions);
    if (random() < 0.5 && publisher) {
      const result = await publisher.publish(EVENT, JSON.parse(crlfJson(n, bytes)) as unknown, { key });
      expect(result.partition).toBe(partition);
    } else {
      await redis.xadd(keys.stream(partition), '*', 'event', EVENT, 'key', key, 'data', crlfJson(n, bytes));
    }
    produced.push({ key, n, partition });
  }
  return produced;
}

interface Drain {
  /** Bytes the own reader read (spy on `RespReader.prototype.write`). */
  readBytes: number;
  /** Faults fired while some read connection's reader held a bulk string cut by a chunk boundary. */
  midReplyFaults: number;
  /** Read connections seen with their replies read by `RespReader` while ready. */
  ownConnections: number;
  readConnections: Redis[];
  /** What the faults themselves failed with (a fault that did not happen proves nothing). */
  faultErrors: string[];
  /** Read connections closed from Redis's side (ioredis then reconnects them): cuts, kills, restarts. */
  serverCloses: number;
}

/**
 * Runs a drain of a backlog on `server`; `fault` runs (one at a time, at most `maxFaults` times) whenever
 * a reader is half-way through a bulk string over 64 KiB.
 */
async function drain(
  server: { url: string },
  options: {
    partitions: number;
    total: number;
    seed: number;
    maxFaults: number;
    fault?: (drain: Drain) => Promise<void>;
    consumer?: Record<string, unknown>;
    shares?: { big: number; medium: number };
    /** Every entry appended by a raw XADD before eventrail first starts on the log (none indexed: the script reads them). */
    rawBeforeStart?: boolean;
  },
): Promise<Drain> {
  const prefix = uniquePrefix('own-reader');
  const keys = new EventrailKeys(prefix, options.partitions);
  const redis = new Redis(server.url);
  const state: Drain = { readBytes: 0, midReplyFaults: 0, ownConnections: 0, readConnections: [], faultErrors: [], serverCloses: 0 };
  const original = RespReader.prototype.write;
  let faultRunning = false;
  let draining = false;
  const write = jest.spyOn(RespReader.prototype, 'write').mockImplementation(function (this: RespReader, chunk: Buffer) {
    state.readBytes += chunk.length;
    original.call(this, chunk);
    const cut = (this as unknown as { partialBulk?: { length: number } }).partialBulk;
    if (draining && cut && cut.length > 64 * KIB && options.fault && !faultRunning && state.midReplyFaults < options.maxFaults) {
      faultRunning = true;
      state.midReplyFaults++;
      void options
        .fault(state)
        .catch((error: Error) => void state.faultErrors.push(error.message))
        .finally(() => (faultRunning = false));
    }
  });
  const duplicate = EventrailRedis.prototype.duplicateForReads;
  const reads = jest.spyOn(EventrailRedis.prototype, 'duplicateForReads').mockImplementation(function (this: EventrailRedis) {
    const connection = duplicate.call(this) as Redis;
    state.readConnections.push(connection);
    connection.on('ready', () => {
      if (readsWithRespReader(connection)) state.ownConnections++;
    });
    connection.on('close', () => {
      if (draining && connection.status === 'reconnecting') state.serverCloses++;
    });
    return connection;
  });
  const early = options.rawBeforeStart
    ? await produce(undefined, redis, keys, options.partitions, options.seed, options.total, options.shares)
    : undefined;
  const app = await createApp(
    {
      redis: server.url,
      prefix,
      partitions: options.partitions,
      maxPayloadBytes: 4 * MIB,
      autoStart: false,
      consumer: { lockTtlMs: 3_000, ...options.consumer },
    },
    [Alpha, Beta],
  );
  try {
    const produced = early ?? (await produce(app, redis, keys, options.partitions, options.seed, options.total, options.shares));
    draining = true;
    await app.get(EventrailConsumers).start();
    await waitFor(
      () => offsetsAtEnd(redis, keys, GROUPS, options.partitions),
      () => `committed offsets at each partition's end (${handlings.length} handlings, ${state.midReplyFaults} faults)`,
      50_000,
      100,
    );
    draining = false;
    expect(state.faultErrors).toEqual([]);
    expectEveryEventInKeyOrder(GROUPS, produced, handlings);
    return state;
  } finally {
    draining = false;
    await app.close();
    write.mockRestore();
    reads.mockRestore();
    redis.disconnect();
  }
}

/** `CLIENT KILL ADDR` of each read connection of the workers that has a socket now. */
async function killReadConnections(admin: Redis, state: Drain): Promise<void> {
  for (const connection of state.readConnections) {
    const port = (connection as unknown as { stream?: { localPort?: number } }).stream?.localPort;
    if (connection.status !== 'ready' || !port) continue;
    await admin.client('KILL', 'ADDR', `127.0.0.1:${port}`).catch(() => undefined);
  }
}

afterEach(() => {
  handlings.length = 0;
  jest.restoreAllMocks();
});

describe('own reply reader under faults: a worker’s reads', () => {
  let server: RedisServer;
  let admin: Redis;

  beforeAll(async () => {
    server = await startRedisServer(undefined, ['--enable-debug-command', 'yes']);
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    admin?.disconnect();
    await server?.stop();
  });

  it('drain 4 partitions × 2 groups of CR/LF entries up to 1.2 MiB while their read connections are killed in the middle of replies', async () => {
    const state = await drain(server, {
      partitions: 4,
      total: 200,
      seed: 1,
      maxFaults: 12,
      fault: (s) => killReadConnections(admin, s),
    });
    expect(state.ownConnections).toBeGreaterThan(0);
    expect(state.readBytes).toBeGreaterThan(8 * MIB);
    expect(state.midReplyFaults).toBeGreaterThanOrEqual(3);
    expect(state.serverCloses).toBeGreaterThanOrEqual(3);
  });

  it('drain while CLIENT KILL TYPE normal cuts every connection, the app’s own too, in the middle of replies', async () => {
    const state = await drain(server, {
      partitions: 3,
      total: 80,
      seed: 2,
      maxFaults: 3,
      fault: () => admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes').then(() => undefined),
    });
    expect(state.ownConnections).toBeGreaterThan(0);
    expect(state.midReplyFaults).toBeGreaterThanOrEqual(2);
    expect(state.serverCloses).toBeGreaterThanOrEqual(2);
  });

  it('drain while SCRIPT FLUSH empties the script cache in the middle of replies (EVALSHA answered NOSCRIPT)', async () => {
    const state = await drain(server, {
      partitions: 2,
      total: 80,
      seed: 3,
      maxFaults: 8,
      fault: () => admin.script('FLUSH').then(() => undefined),
    });
    expect(state.ownConnections).toBeGreaterThan(0);
    expect(state.midReplyFaults).toBeGreaterThanOrEqual(3);
  });

  it('drain while CLIENT PAUSE and DEBUG SLEEP stall Redis in the middle of replies', async () => {
    let turn = 0;
    const state = await drain(server, {
      partitions: 2,
      total: 60,
      seed: 4,
      maxFaults: 4,
      fault: async () => {
        if (turn++ % 2 === 0) await admin.client('PAUSE', 300, 'ALL');
        else await admin.debug('SLEEP', '0.3');
      },
    });
    expect(state.ownConnections).toBeGreaterThan(0);
    expect(state.midReplyFaults).toBeGreaterThanOrEqual(2);
  });
});

describe.each(['own', 'ioredis'] as const)('a client-output-buffer-limit under the reads (%s reader)', (reader) => {
  let server: RedisServer;
  const saved = process.env.EVENTRAIL_REPLY_READER;

  beforeAll(async () => {
    if (reader === 'ioredis') process.env.EVENTRAIL_REPLY_READER = 'ioredis';
    // Entries of 70-100 KiB of CR/LF (up to twice that, escaped in JSON) fit a read alone; an 8 MiB read (maxReadBytes) of them does not.
    server = await startRedisServer(undefined, ['--client-output-buffer-limit', 'normal 2mb 0 0']);
  });
  afterAll(async () => {
    if (saved === undefined) delete process.env.EVENTRAIL_REPLY_READER;
    else process.env.EVENTRAIL_REPLY_READER = saved;
    await server?.stop();
  });

  it('cuts replies of the byte-counting reads; every event is handled, in order per key, offsets at the end', async () => {
    const state = await drain(server, {
      partitions: 2,
      total: 150,
      seed: 5,
      maxFaults: 0,
      shares: { big: 0, medium: 0.6 },
      consumer: { maxReadBytes: 8 * MIB },
      rawBeforeStart: true,
    });
    // Redis cut reads: it closed read connections under them.
    expect(state.serverCloses).toBeGreaterThan(0);
    if (reader === 'own') {
      expect(state.ownConnections).toBeGreaterThan(0);
      expect(state.readBytes).toBeGreaterThan(8 * MIB);
    } else {
      expect(state.ownConnections).toBe(0);
      expect(state.readBytes).toBe(0);
    }
  });
});

describe('redis-server killed with -9 in the middle of a drain, restarted on the same port (its scripts lost)', () => {
  let dir: string;
  let port: number;
  let server: RedisServer;
  const persisted = (): string[] => ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'own-reader-kill-'));
    port = await freePort();
    server = await startRedisServer(port, persisted());
  });
  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('drains every event at least once, in order per key, offsets at the end', async () => {
    let restarts = 0;
    const state = await drain(server, {
      partitions: 2,
      total: 70,
      seed: 6,
      maxFaults: 2,
      fault: async () => {
        await server.stop('SIGKILL');
        server = await startRedisServer(port, persisted());
        restarts++;
      },
    });
    expect(restarts).toBeGreaterThanOrEqual(1);
    expect(state.serverCloses).toBeGreaterThanOrEqual(1);
    // Read connections came back on the restarted server, read by RespReader again.
    expect(state.ownConnections).toBeGreaterThan(state.readConnections.length > 0 ? 1 : 0);
  });
});

/** A redis-server binary that keeps a bare LF of a script's error message in its error reply (Redis 7.4, Valkey 8.0). */
function serverKeepingLf(): string {
  for (const name of ['server-redis-7.4', 'server-valkey-8.0']) {
    const binary = `/root/.cache/eventrail-ci/${name}/redis-server`;
    if (existsSync(binary)) return binary;
  }
  return 'redis-server'; // CI's Redis 7.4 and Valkey 8.0 runs put them first on the PATH
}

/** A JSON replacer that writes a Buffer's bytes as text, so a key prefix in it can be named. */
function bytesAsText(_key: string, value: unknown): unknown {
  const bytes = value as { type?: string; data?: number[] } | null;
  return bytes?.type === 'Buffer' && Array.isArray(bytes.data) ? Buffer.from(bytes.data).toString('latin1') : value;
}

describe('an error reply whose message holds a bare LF (a Lua error on Redis 7.4 / Valkey 8.0)', () => {
  let child: ChildProcess;
  let url: string;
  const saved = process.env.EVENTRAIL_REPLY_READER;

  beforeAll(async () => {
    const port = await freePort();
    child = spawn(
      serverKeepingLf(),
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', tmpdir()],
      {
        stdio: 'ignore',
      },
    );
    url = `redis://127.0.0.1:${port}`;
    await waitUntilAnswers(url);
  });
  afterAll(() => {
    if (saved === undefined) delete process.env.EVENTRAIL_REPLY_READER;
    else process.env.EVENTRAIL_REPLY_READER = saved;
    child?.kill('SIGKILL');
  });

  /**
   * On a worker's read connection: a script that fails with a two-line message, pipelined with an XREAD and a PING.
   * Each run has a key prefix of its own, named `<prefix>` in the outcomes.
   */
  const outcomes = async (reader: 'own' | 'ioredis'): Promise<{ own: boolean; outcomes: unknown[] }> => {
    if (reader === 'ioredis') process.env.EVENTRAIL_REPLY_READER = 'ioredis';
    else delete process.env.EVENTRAIL_REPLY_READER;
    const prefix = uniquePrefix('lf');
    const app = await createApp({ redis: url, prefix, autoStart: false });
    try {
      const redis = app.get(EventrailRedis);
      await redis.client.xadd(redis.keys.stream(0), '1-1', 'event', EVENT, 'data', '{"n":1}');
      const connection = redis.duplicateForReads() as Redis;
      await connection.ping();
      const own = readsWithRespReader(connection);
      const settled = await Promise.allSettled([
        connection.eval("error('line one\\nline two')", 0),
        connection.xreadBuffer('COUNT', 1, 'STREAMS', redis.keys.stream(0), '0'),
        connection.ping(),
      ]);
      connection.disconnect();
      return {
        own,
        outcomes: settled.map((s) =>
          s.status === 'fulfilled'
            ? { value: JSON.stringify(s.value, bytesAsText).split(prefix).join('<prefix>') }
            : { error: (s.reason as Error).message.replace(/[0-9a-f]{40}/, '<sha>'), reply: s.reason instanceof ReplyError },
        ),
      };
    } finally {
      await app.close();
    }
  };

  it('is answered as ioredis answers it: that command fails with a ReplyError, the XREAD and PING after it succeed', async () => {
    const theirs = await outcomes('ioredis');
    const mine = await outcomes('own');
    expect(theirs.own).toBe(false);
    expect(mine.own).toBe(true);
    // What ioredis's decoder gives (it ends a line at CR): the script's error, then the entry, then PONG.
    expect(theirs.outcomes[0]).toEqual({ error: expect.stringMatching(/line one\n?\s?line two/) as unknown, reply: true });
    expect(mine.outcomes).toEqual(theirs.outcomes);
  });
});
