import { createHash } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import Redis, { ReplyError, type RedisOptions } from 'ioredis';
import { ownReplyReaderEnabled, readRepliesWithRespReader, readsWithRespReader, READER_INTERNALS } from '../../lib/redis/own-reply-reader';
import { sendLean, sendLeanScript } from '../../lib/redis/lean-command';
import { leanScript } from '../../lib/redis/scripts';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';
import { waitFor } from '../support/helpers';
import { createApp } from '../support/app';
import { EventrailPublisher } from '../../lib';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';

type Call = [name: string, ...args: Array<string | number | Buffer>];

/** A reply in a form `toEqual` compares quickly: Jest walks a Buffer byte by byte, which takes minutes at 48 MiB. */
function comparable(value: unknown): unknown {
  if (Buffer.isBuffer(value)) return `Buffer(${value.length}) ${createHash('sha1').update(value).digest('hex')}`;
  if (typeof value === 'string' && value.length > 64) return `string(${value.length}) ${createHash('sha1').update(value).digest('hex')}`;
  if (Array.isArray(value)) return value.map(comparable);
  if (value instanceof Error) return { error: value.message, type: value.constructor.name };
  return value;
}

/**
 * A partition worker's read connection reads its replies with eventrail's own
 * RESP reader in place of ioredis's decoder (own-reply-reader.ts). Everything
 * the worker sends on it must settle exactly as it would through ioredis: the
 * same values of the same types, the same errors, in order, across chunk
 * boundaries, reconnects and cut replies. Each check here runs the same calls
 * on a plain ioredis connection and on one read by `RespReader`, and compares.
 */
describe('own reply reader under ioredis', () => {
  let server: RedisServer;
  let plain: Redis;
  let ours: Redis;

  const ownReader = async (options: RedisOptions = {}): Promise<Redis> => {
    const connection = new Redis(server.url, { ...options, lazyConnect: true });
    expect(readRepliesWithRespReader(connection)).toBe(true);
    await connection.connect();
    return connection;
  };

  beforeAll(async () => {
    server = await startRedisServer();
    plain = new Redis(server.url);
    ours = await ownReader();
  });
  afterAll(async () => {
    plain?.disconnect();
    ours?.disconnect();
    await server?.stop();
  });

  it('finds the ioredis internals it uses, and reads the connection’s replies itself', async () => {
    for (const name of READER_INTERNALS) expect(typeof (ours as unknown as Record<string, unknown>)[name]).toBe('function');
    expect(await ours.ping()).toBe('PONG');
    expect(readsWithRespReader(ours)).toBe(true);
    expect(readsWithRespReader(plain)).toBe(false);
  });

  /** Runs `calls` pipelined on both connections (by default in one database), which must give the same outcomes. */
  const sameOutcomes = async (calls: Call[], buffers: boolean, [theirConnection, myConnection] = [plain, ours]): Promise<void> => {
    const run = (connection: Redis): Promise<unknown[]> =>
      Promise.all(
        calls.map(([name, ...args]) =>
          (buffers ? connection.callBuffer(name, ...args) : connection.call(name, ...args)).then(
            (value) => ({ value: comparable(value) }),
            (error: Error) => ({ error: error.message, type: error.constructor.name, isReply: error instanceof ReplyError }),
          ),
        ),
      );
    const theirs = await run(theirConnection);
    const mine = await run(myConnection);
    expect(mine).toEqual(theirs);
  };

  it('answers generated commands of every reply type as ioredis does, as strings and as Buffers, pipelined', async () => {
    const random = seededRandom(29);
    const pick = (n: number): number => Math.floor(random() * n);
    const bytes = (n: number): Buffer => Buffer.from(Array.from({ length: n }, () => pick(256)));
    // Bulk strings full of CR and LF, empty, and long enough to span socket chunks.
    const value = (): Buffer | string => {
      switch (pick(5)) {
        case 0:
          return bytes(pick(80));
        case 1:
          return '\r\n'.repeat(pick(10)) + 'ü🙂';
        case 2:
          return bytes(70_000 + pick(100_000));
        case 3:
          return '';
        default:
          return String(pick(1e9) - 5e8);
      }
    };
    // A Lua script answering nested arrays of every RESP2 type, with nils and errors inside.
    const nested = `local function build(depth)
      local out = {}
      for i = 1, tonumber(ARGV[1]) do
        local kind = (i + depth) % 6
        if kind == 0 and depth < 3 then out[#out + 1] = build(depth + 1)
        elseif kind == 1 then out[#out + 1] = i * 1000003
        elseif kind == 2 then out[#out + 1] = {ok = 'fine'}
        elseif kind == 3 then out[#out + 1] = {err = 'nested failure ' .. i}
        elseif kind == 4 then out[#out + 1] = ARGV[2]
        else out[#out + 1] = -i end
      end
      return out
    end
    return build(0)`;
    // Calls that write run in two databases of their own (given by SELECT in each connection's handshake),
    // so each connection meets the same state.
    const theirDb = new Redis(server.url, { db: 3 });
    const myDb = await ownReader({ db: 4 });
    await theirDb.flushdb();
    await myDb.flushdb();
    for (let round = 0; round < 12; round++) {
      const calls: Call[] = [];
      for (let i = 0; i < 60; i++) {
        const key = `k${round}-${pick(6)}`;
        switch (pick(12)) {
          case 0:
            calls.push(['set', key, value()]);
            break;
          case 1:
            calls.push(['get', key]);
            break;
          case 2:
            calls.push(['xadd', `s${round}`, `${i + 1}-0`, 'f', value(), 'g', value()]);
            break;
          case 3:
            calls.push(['xrange', `s${round}`, '-', '+', 'COUNT', pick(40)]);
            break;
          case 4:
            calls.push(['xread', 'COUNT', pick(40) + 1, 'STREAMS', `s${round}`, '0-0']);
            break;
          case 5:
            calls.push(['incrby', `n${round}`, pick(1e6) - 5e5]);
            break;
          case 6:
            calls.push(['lpush', key, value()]); // WRONGTYPE on a string key: an error reply among replies
            break;
          case 7:
            calls.push(['eval', nested, 0, pick(9), value()]);
            break;
          case 8:
            calls.push(['eval', "return redis.error_reply('top-level failure')", 0]);
            // Redis 7.4 and Valkey 8.0 keep a Lua error's LFs in the error line (7.0 turns them into spaces).
            calls.push(['eval', "error('line one\\nline two')", 0]);
            calls.push(['eval', "return redis.status_reply('status\\nwith a break')", 0]);
            break;
          case 9:
            calls.push(['hset', `h${round}`, `f${pick(5)}`, value()]);
            calls.push(['hgetall', `h${round}`]);
            break;
          case 10:
            calls.push(['xread', 'COUNT', 1, 'STREAMS', `empty${round}`, '0-0']); // a null array
            break;
          default:
            calls.push(['no-such-command', key]);
        }
      }
      await sameOutcomes(calls, round % 2 === 0, [theirDb, myDb]);
    }
    expect(readsWithRespReader(myDb)).toBe(true);
    expect(await myDb.dbsize()).toBeGreaterThan(0);
    expect(await myDb.dbsize()).toBe(await theirDb.dbsize());
    theirDb.disconnect();
    myDb.disconnect();
  });

  it('reads a reply of several MiB that arrives in many chunks, and the replies after it', async () => {
    const big = Buffer.alloc(6 * 1024 * 1024, 'x');
    big.write('\r\n$5\r\nnot a reply\r\n', 1000);
    await plain.del('big', 'big-stream');
    for (let i = 0; i < 8; i++) await plain.xadd('big-stream', '*', 'data', big.subarray(0, big.length - i * 1000));
    await sameOutcomes(
      [
        ['xrange', 'big-stream', '-', '+'],
        ['ping', 'after'],
        ['xread', 'COUNT', 3, 'STREAMS', 'big-stream', '0-0'],
      ],
      true,
    );
  });

  it('settles the hot path’s lean commands and scripts, including a script the server lost (NOSCRIPT, sent again as EVAL)', async () => {
    const releaseLock = leanScript('eventrailReleaseLock');
    await plain.set('lock', 'token-1');
    expect(await sendLeanScript<number>(ours, releaseLock, ['lock', 'token-2'])).toBe(0);
    await plain.script('FLUSH');
    expect(await sendLeanScript<number>(ours, releaseLock, ['lock', 'token-1'])).toBe(1);
    await plain.xadd('lean', '1-0', 'f', 'v');
    const reply = await sendLean<Array<[Buffer, Array<[Buffer, Buffer[]]>]>>(ours, 'xread', ['COUNT', 5, 'STREAMS', 'lean', '0-0'], true);
    expect(reply[0][1]).toEqual([[Buffer.from('1-0'), [Buffer.from('f'), Buffer.from('v')]]]);
  });

  it('applies reconnectOnError to an error reply, as ioredis does', async () => {
    const seen: string[] = [];
    const connection = await ownReader({
      reconnectOnError: (error: Error) => {
        seen.push(error.message);
        return 2; // reconnect and send the command again
      },
    });
    try {
      await plain.set('flaky', 'string');
      // WRONGTYPE until the key changes type: the resent command then succeeds on the new socket.
      const push = connection.lpush('flaky', 'v');
      await waitFor(() => seen.length > 0, 'the WRONGTYPE reply seen by reconnectOnError');
      await plain.del('flaky');
      expect(await push).toBe(1);
      expect(seen[0]).toMatch(/^WRONGTYPE/);
      expect(readsWithRespReader(connection)).toBe(true);
    } finally {
      connection.disconnect();
    }
  });

  it('fails the commands of a socket killed in the middle of a reply, and reads the next socket’s replies from their start', async () => {
    const connection = await ownReader({ maxRetriesPerRequest: 0 });
    try {
      const id = String(await connection.client('ID'));
      const before = (connection as unknown as { stream: object }).stream;
      await plain.del('cut');
      const chunk = Buffer.alloc(512 * 1024, 'c');
      for (let i = 0; i < 24; i++) await plain.xadd('cut', '*', 'data', chunk);
      // 12 MiB of replies in flight; the socket dies while they are read.
      const reads = Array.from({ length: 4 }, () =>
        connection.xrangeBuffer('cut', '-', '+').then(
          () => 'answered',
          () => 'failed',
        ),
      );
      await plain.client('KILL', 'ID', id);
      const outcomes = await Promise.all(reads);
      expect(outcomes).toContain('failed');
      await waitFor(() => connection.status === 'ready', 'the connection back after CLIENT KILL');
      expect((connection as unknown as { stream: object }).stream).not.toBe(before);
      expect(readsWithRespReader(connection)).toBe(true);
      const again = await connection.xrangeBuffer('cut', '-', '+');
      expect(again).toHaveLength(24);
      expect(again.every(([, fields]) => fields[1].equals(chunk))).toBe(true);
      expect(await connection.ping('still in order')).toBe('still in order');
    } finally {
      connection.disconnect();
    }
  });

  it('reads RESP2 connections too, and drops RESP3 push frames (they answer no command)', async () => {
    const resp2 = await ownReader({ protocol: 2 } as RedisOptions);
    const resp3 = ours;
    try {
      expect(readsWithRespReader(resp2)).toBe(true);
      await plain.del('h2');
      await plain.hset('h2', 'a', '1', 'b', '2');
      expect(await resp2.hgetall('h2')).toEqual(await resp3.hgetall('h2'));
      // CLIENT TRACKING sends an invalidation push on the connection itself when a key it read changes.
      await resp3.client('TRACKING', 'ON');
      await resp3.get('tracked');
      await plain.set('tracked', 'changed');
      expect(await resp3.get('tracked')).toBe('changed');
      await plain.set('tracked', 'again');
      expect(await resp3.ping('after the push')).toBe('after the push');
      await resp3.client('TRACKING', 'OFF');
    } finally {
      resp2.disconnect();
    }
  });

  it('reads the replies of eventrail’s own connection (publishing), never of the application’s own client', async () => {
    const own = await createApp({ redis: server.url, prefix: 'own-reader' });
    const given = new Redis(server.url);
    const adopted = await createApp({ redis: given, prefix: 'own-reader' });
    try {
      expect(readsWithRespReader(own.get(EventrailRedis).client as Redis)).toBe(true);
      expect(adopted.get(EventrailRedis).client).toBe(given);
      expect(readsWithRespReader(given)).toBe(false);
      // A publish's XADD and a publishMany's QUEUED and EXEC replies, read by it, answer as through ioredis.
      const publisher = own.get(EventrailPublisher);
      const one = await publisher.publish('own.reader', { n: 0 });
      const many = await publisher.publishMany(Array.from({ length: 300 }, (_, n) => ({ event: 'own.reader', data: { n: n + 1 } })));
      const entries = await given.xrange(own.get(EventrailRedis).keys.stream(0), '-', '+');
      expect([one, ...many].map((published) => published.offset)).toEqual(entries.map(([offset]) => offset));
      expect(entries.map(([, fields]) => JSON.parse(fields[fields.indexOf('data') + 1]).n)).toEqual(
        Array.from({ length: 301 }, (_, n) => n),
      );
    } finally {
      await own.close();
      await adopted.close();
      given.disconnect();
    }
  });

  it('hands ioredis’s maintenance notifications to its own handler, as its decoder does, and reads on after them', async () => {
    // Redis Enterprise and Redis Cloud send these pushes before a migration or failover; a Redis of our own
    // does not, so the frames are put on the live socket as the server would write them, on both connections.
    const seen = new Map<Redis, unknown[]>();
    const kinds = (connection: Redis): unknown[] => seen.get(connection) ?? [];
    const onNotification = (notification: unknown): void => {
      // The diagnostics channel says which connection only by timing: each connection is sent its frames alone.
      seen.get(current)?.push(notification);
    };
    let current: Redis = plain;
    diagnostics.subscribe('ioredis:maintenance', onNotification);
    try {
      for (const connection of [plain, ours]) {
        current = connection;
        seen.set(connection, []);
        const stream = (connection as unknown as { stream: NodeJS.EventEmitter }).stream;
        // A notification split across chunks, a pub/sub-looking push that answers nothing, and the end of the window.
        const frames = Buffer.from(
          '>4\r\n$9\r\nMIGRATING\r\n:7\r\n:15\r\n$5\r\n["1"]\r\n>2\r\n$10\r\ninvalidate\r\n*0\r\n>2\r\n$8\r\nMIGRATED\r\n:8\r\n',
        );
        stream.emit('data', frames.subarray(0, 11));
        stream.emit('data', frames.subarray(11));
        expect(await connection.ping('after the notifications')).toBe('after the notifications');
      }
    } finally {
      diagnostics.unsubscribe('ioredis:maintenance', onNotification);
    }
    expect(kinds(plain).map((n) => (n as { type: string }).type)).toEqual(['MIGRATING', 'MIGRATED']);
    expect(kinds(ours)).toEqual(kinds(plain));
  });

  it('tells a waiter when its replies have emptied the command queue, as ioredis’s handler does (a maintenance handoff waits for it)', async () => {
    // ioredis 6.1's own (private) wait, as its maintenance handoff calls it.
    const waitForDrain = (connection: Redis): Promise<void> =>
      (connection as unknown as { waitForCommandQueueToDrain(): Promise<void> }).waitForCommandQueueToDrain();
    for (const connection of [plain, ours]) {
      let answered = false;
      const slow = connection.call('BLPOP', 'never-pushed', '0.2').then(() => (answered = true));
      const drained = waitForDrain(connection).then(() => answered);
      // Drained once the slow command (and nothing else) was answered, never before; a reader that does not
      // signal it leaves the waiter hanging and this test timing out.
      expect(await drained).toBe(true);
      await slow;
    }
  });

  it('leaves ioredis’s decoder where the connection asks for the resp3 reply mapping, reads numbers as strings, or EVENTRAIL_REPLY_READER=ioredis', async () => {
    const resp3 = await ownReader({ replyMapping: 'resp3' } as RedisOptions);
    const strings = await ownReader({ stringNumbers: true });
    try {
      expect(await resp3.incr('resp3-counter')).toBe(1);
      expect(readsWithRespReader(resp3)).toBe(false);
      expect(await strings.incr('string-counter')).toBe('1');
      expect(readsWithRespReader(strings)).toBe(false);
    } finally {
      resp3.disconnect();
      strings.disconnect();
    }
    process.env.EVENTRAIL_REPLY_READER = 'ioredis';
    try {
      expect(ownReplyReaderEnabled()).toBe(false);
    } finally {
      delete process.env.EVENTRAIL_REPLY_READER;
    }
    expect(ownReplyReaderEnabled()).toBe(true);
  });
});
