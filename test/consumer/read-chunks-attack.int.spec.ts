import { connect } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Injectable, INestApplicationContext, Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, EventrailPublisher, OnEvent } from '../../lib';
import { EventrailScripts } from '../../lib/redis/eventrail-scripts';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisCluster, startRedisCluster } from '../support/redis-cluster';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';

const KIB = 1024;
const MIB = 1024 * KIB;
/** The least `maxReadBytes` the options accept. */
const LEAST_BOUND = 65_536;
/** What the read counts for the id and each field beyond its bytes (a reply's framing): readBacklog-1.lua's FRAME. */
const FRAME = 8;
const NEW_LUA = readFileSync(join(__dirname, '../../lib/redis/scripts/readBacklog-1.lua'), 'utf8');

/**
 * readBacklog-1.lua as it was before it read in chunks: one XRANGE COUNT 1 per entry, the reply packed
 * with cmsgpack. A worker of the previous release still sends it (by its own SHA) beside the new one, so
 * one group's partition can be read by both in turn during a rolling deploy.
 */
const PREVIOUS_LUA = `
local rcall = redis.call
local stream = KEYS[1]
local after = ARGV[1]
local most = tonumber(ARGV[2])
local bound = tonumber(ARGV[3])
local entries = {}
local total = 0
local largest = 0
local left = 0
for n = 1, most do
  local entry = rcall("XRANGE", stream, "(" .. after, "+", "COUNT", 1)[1]
  if not entry then
    break
  end
  local bytes = #entry[1]
  local fields = entry[2]
  for f = 1, #fields do
    bytes = bytes + #fields[f]
  end
  if n > 1 and total + bytes > bound then
    left = bytes
    break
  end
  total = total + bytes
  if bytes > largest then
    largest = bytes
  end
  entries[n] = entry
  after = entry[1]
end
return { cmsgpack.pack(entries), largest, left }
`;

interface LogEntry {
  id: string;
  fields: Buffer[];
  bytes: number;
}

interface Read {
  ids: string[];
  largest: number;
  left: number;
}

/** Stream ids compared as numbers (ms, then sequence). */
function compareIds(a: string, b: string): number {
  const [am, as] = a.split('-').map(BigInt);
  const [bm, bs] = b.split('-').map(BigInt);
  return am !== bm ? (am < bm ? -1 : 1) : as === bs ? 0 : as < bs ? -1 : 1;
}

/** The read the promise describes, worked out from the whole log: the oracle every script reply is held to. */
function expectedRead(log: LogEntry[], after: string, count: number, bound: number): Read {
  const ids: string[] = [];
  let total = 0;
  let largest = 0;
  for (const entry of log) {
    if (compareIds(entry.id, after) <= 0) continue;
    if (ids.length === count) return { ids, largest, left: 0 };
    if (ids.length > 0 && total + entry.bytes > bound) return { ids, largest, left: entry.bytes };
    ids.push(entry.id);
    total += entry.bytes;
    largest = Math.max(largest, entry.bytes);
  }
  return { ids, largest, left: 0 };
}

/** The ids in the MessagePack the previous script sends (arrays and strings only, as cmsgpack packs XRANGE's answer). */
function packedIds(packed: Buffer): string[] {
  let at = 0;
  const array = (): number => {
    const type = packed[at];
    if (type >= 0x90 && type <= 0x9f) return (at++, type & 0x0f);
    if (type === 0xdc) return ((at += 3), packed.readUInt16BE(at - 2));
    if (type === 0xdd) return ((at += 5), packed.readUInt32BE(at - 4));
    throw new Error(`type ${type} at ${at} where an array was expected`);
  };
  const string = (): Buffer => {
    const type = packed[at];
    let length: number;
    if (type >= 0xa0 && type <= 0xbf) length = (at++, type & 0x1f);
    else if (type === 0xd9 || type === 0xc4) length = ((at += 2), packed[at - 1]);
    else if (type === 0xda || type === 0xc5) length = ((at += 3), packed.readUInt16BE(at - 2));
    else if (type === 0xdb || type === 0xc6) length = ((at += 5), packed.readUInt32BE(at - 4));
    else throw new Error(`type ${type} at ${at} where a string was expected`);
    at += length;
    return packed.subarray(at - length, at);
  };
  const ids: string[] = [];
  for (let e = array(); e > 0; e--) {
    array();
    ids.push(string().toString());
    for (let f = array(); f > 0; f--) string();
  }
  expect(at).toBe(packed.length);
  return ids;
}

/** Names a generated entry may use: empty, binary, protocol characters, eventrail's own, long. */
const ODD_NAMES = [
  Buffer.alloc(0),
  Buffer.from([0, 255, 13, 10]),
  Buffer.from('\r\n$-1\r\n'),
  Buffer.from('data'),
  Buffer.from('t'),
  Buffer.from('ü名'),
  Buffer.alloc(300, 'n'),
];

/**
 * A log from a seed: runs of entries whose sizes jump between orders of magnitude (0 B to `biggest`),
 * 1 to 40 fields with odd names and binary values, some entries deleted (XDEL) after they were added.
 * Returns what XRANGE then holds, with each entry's size as the script counts it.
 */
async function generateLog(redis: Redis, stream: string, seed: number, entries: number, biggest: number): Promise<LogEntry[]> {
  const random = seededRandom(seed);
  const pick = <T>(items: T[]): T => items[Math.floor(random() * items.length)];
  let scale = 16;
  const added: string[] = [];
  for (let i = 0; i < entries; i++) {
    // A run keeps its scale for a while, then jumps anywhere between 0 B and the biggest.
    if (random() < 0.08) scale = Math.floor(Math.exp(random() * Math.log(biggest + 1))) - 1;
    const pairs = 1 + Math.floor(random() * (random() < 0.9 ? 3 : 40));
    const args: Buffer[] = [];
    for (let p = 0; p < pairs; p++) {
      const value = Buffer.alloc(Math.floor((scale / pairs) * (0.5 + random())));
      for (let b = 0; b < Math.min(value.length, 64); b++) value[b] = Math.floor(random() * 256);
      args.push(pick(ODD_NAMES), value);
    }
    added.push(String(await redis.xadd(stream, '*', ...args)));
  }
  const deleted = added.filter(() => random() < 0.05);
  if (deleted.length > 0) await redis.xdel(stream, ...deleted);
  return (await redis.xrangeBuffer(stream, '-', '+')).map(([id, fields]) => ({
    id: id.toString(),
    fields,
    bytes: fields.reduce((sum, field) => sum + field.length, id.length + FRAME * (fields.length + 1)),
  }));
}

/** The bytes of a RESP reply to `args`, counted on a socket of its own: what Redis buffered for it. */
function replyBytes(port: number, args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const command = `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('');
    let bytes = 0;
    const chunks: Buffer[] = [];
    socket.on('error', reject);
    socket.on('data', (data) => {
      bytes += data.length;
      chunks.push(data);
      // The script's reply is an array of three ending with two integers: complete once both are in.
      const tail = Buffer.concat(chunks.slice(-2)).toString('latin1');
      if (/:\d+\r\n:\d+\r\n$/.test(tail)) {
        socket.end();
        resolve(bytes);
      }
    });
    socket.write(command);
  });
}

/** A process's resident set now (VmRSS) or at its peak since the last reset (VmHWM), in bytes. */
function residentBytes(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)![1]) * 1024;
}

/** Starts a new peak (VmHWM) at the resident set now: Linux's clear_refs, on a server this file started. */
function resetPeak(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, '5');
}

/**
 * The byte-bounded backlog read (readBacklog-1.lua, chunks of XRANGE) attacked at the script: generated
 * logs over many seeds held to an oracle worked out from the whole log, the previous release's script
 * reading the same group's partition in turn, Lua's memory, and the bytes a reply really costs.
 */
describe('backlog reads in chunks, attacked', () => {
  let server: RedisServer;
  let redis: Redis;
  let previousSha: string;

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.port, '127.0.0.1', { lazyConnect: true });
    await redis.connect();
    previousSha = String(await redis.script('LOAD', PREVIOUS_LUA));
  });

  afterAll(async () => {
    redis.disconnect();
    await server.stop();
  });

  async function readNew(stream: string, after: string, count: number, bound: number): Promise<Read> {
    const read = await EventrailScripts.readBacklog(redis, stream, after, count, bound);
    return { ids: read.entries.map(([id]) => id.toString()), largest: read.largest, left: read.left };
  }

  async function readPrevious(stream: string, after: string, count: number, bound: number): Promise<Read> {
    const [packed, largest, left] = (await redis.callBuffer('EVALSHA', previousSha, 1, stream, after, count, bound)) as [
      Buffer,
      number,
      number,
    ];
    return { ids: packedIds(packed), largest: Number(largest), left: Number(left) };
  }

  it('stops where the oracle says (sizes with their framing), on 40 generated logs, each drained whole with generated bounds and counts', async () => {
    let reads = 0;
    let cutByBytes = 0;
    let aloneOverBound = 0;
    for (let seed = 1; seed <= 40; seed++) {
      const stream = `log:${seed}`;
      // Every fifth seed has entries of megabytes; the others stay small so there are many reads.
      const biggest = seed % 5 === 0 ? 5 * MIB : 200 * KIB;
      const log = await generateLog(redis, stream, seed, seed % 5 === 0 ? 60 : 300, biggest);
      const random = seededRandom(seed * 7919);
      const drained: string[] = [];
      let after = '0-0';
      for (;;) {
        const count = random() < 0.2 ? 1 : 1 + Math.floor(random() ** 2 * 1000);
        const bound = random() < 0.3 ? LEAST_BOUND : LEAST_BOUND + Math.floor(random() * 8 * MIB);
        const want = expectedRead(log, after, count, bound);
        const got = await readNew(stream, after, count, bound);
        reads++;
        expect({ seed, after, count, bound, ...got }).toEqual({ seed, after, count, bound, ...want });
        if (got.left > 0) cutByBytes++;
        if (got.ids.length === 1 && got.largest > bound) aloneOverBound++;
        if (got.ids.length === 0) break;
        drained.push(...got.ids);
        after = got.ids[got.ids.length - 1];
      }
      // Every entry once, in order; a read after the last one is empty and says nothing was left out.
      expect(drained).toEqual(log.map((entry) => entry.id));
      expect(await readNew(stream, after, 1000, LEAST_BOUND)).toEqual({ ids: [], largest: 0, left: 0 });
      await redis.del(stream);
    }
    // The generated cases reached what they are meant to: reads cut by bytes, and entries over the bound alone.
    // Measured: 245 reads, 94 cut by bytes, 34 of one entry over the bound.
    expect(cutByBytes).toBeGreaterThan(50);
    expect(aloneOverBound).toBeGreaterThan(15);
    expect(reads).toBeGreaterThan(150);
  });

  it('hands a partition back and forth between the previous script and this one, read for read, without losing or repeating an entry', async () => {
    for (let seed = 101; seed <= 112; seed++) {
      const stream = `mixed:${seed}`;
      const log = await generateLog(redis, stream, seed, 250, seed % 3 === 0 ? 3 * MIB : 150 * KIB);
      const random = seededRandom(seed);
      const drained: string[] = [];
      let after = '0-0';
      for (let turn = 0; ; turn++) {
        const count = 1 + Math.floor(random() * 200);
        const bound = LEAST_BOUND + Math.floor(random() * 2 * MIB);
        // The previous script counts no framing, so the two may cut at different entries: each read goes on
        // from where the other stopped, as a handover between releases does.
        const read = turn % 2 === 0 ? await readPrevious(stream, after, count, bound) : await readNew(stream, after, count, bound);
        if (read.ids.length === 0) break;
        drained.push(...read.ids);
        after = read.ids[read.ids.length - 1];
      }
      expect(drained).toEqual(log.map((entry) => entry.id));
      await redis.del(stream);
    }
  });

  it('answers edge reads as the oracle does: a stream that does not exist, a bound below every entry, entries exactly at the bound, count 1, an id past the end', async () => {
    expect(await readNew('log:none', '0-0', 100, LEAST_BOUND)).toEqual({ ids: [], largest: 0, left: 0 });
    const stream = 'log:edges';
    const ids: string[] = [];
    // Four entries of exactly a quarter of the bound (id included), then one of exactly the bound, then two over it.
    const framed = 3 + 1 + 3 * FRAME; // the id, the name 'v', and the framing of the id, the name and the value
    for (let i = 0; i < 4; i++) ids.push(String(await redis.xadd(stream, `1-${i + 1}`, 'v', 'x'.repeat(LEAST_BOUND / 4 - framed))));
    ids.push(String(await redis.xadd(stream, '1-5', 'v', 'x'.repeat(LEAST_BOUND - framed))));
    ids.push(String(await redis.xadd(stream, '1-6', 'v', 'x'.repeat(LEAST_BOUND))));
    ids.push(String(await redis.xadd(stream, '1-7', 'v', 'x'.repeat(3 * LEAST_BOUND))));
    expect(await readNew(stream, '0-0', 100, LEAST_BOUND)).toEqual({ ids: ids.slice(0, 4), largest: LEAST_BOUND / 4, left: LEAST_BOUND });
    expect(await readNew(stream, '1-4', 100, LEAST_BOUND)).toEqual({ ids: ['1-5'], largest: LEAST_BOUND, left: LEAST_BOUND + framed });
    expect(await readNew(stream, '1-5', 100, LEAST_BOUND)).toEqual({
      ids: ['1-6'],
      largest: LEAST_BOUND + framed,
      left: 3 * LEAST_BOUND + framed,
    });
    expect(await readNew(stream, '1-6', 1, LEAST_BOUND)).toEqual({ ids: ['1-7'], largest: 3 * LEAST_BOUND + framed, left: 0 });
    expect(await readNew(stream, '1-7', 100, LEAST_BOUND)).toEqual({ ids: [], largest: 0, left: 0 });
    expect(await readNew(stream, '99-0', 100, LEAST_BOUND)).toEqual({ ids: [], largest: 0, left: 0 });
    // Trimmed and deleted under the reader: an id that is gone still reads from the next one there.
    await redis.xdel(stream, '1-3');
    await redis.xtrim(stream, 'MINID', '1-2');
    expect(await readNew(stream, '1-1', 100, LEAST_BOUND)).toEqual({ ids: ['1-2', '1-4'], largest: LEAST_BOUND / 4, left: LEAST_BOUND });
    expect(await readNew(stream, '0-0', 1, LEAST_BOUND)).toEqual({ ids: ['1-2'], largest: LEAST_BOUND / 4, left: 0 });
    await redis.del(stream);
  });

  it('reads with Redis over maxmemory (noeviction), where a publish is refused: a full Redis can still be drained', async () => {
    const stream = 'log:full';
    for (let i = 0; i < 50; i++) await redis.xadd(stream, '*', 'v', 'x'.repeat(100_000));
    const used = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))![1]);
    await redis.config('SET', 'maxmemory-policy', 'noeviction');
    await redis.config('SET', 'maxmemory', String(used - MIB));
    try {
      await expect(redis.xadd(stream, '*', 'v', 'y')).rejects.toThrow(/OOM/);
      const read = await EventrailScripts.readBacklog(redis, stream, '0-0', 1000, 4 * MIB);
      // 4 MiB holds 41 entries of 100,019 B.
      expect(read.entries.length).toBe(41);
      expect(read.left).toBeGreaterThan(100_000);
    } finally {
      await redis.config('SET', 'maxmemory', '0');
      await redis.del(stream);
    }
  });

  it('copies at most one chunk past its reply: 16 entries after small ones, one after big ones (peak RSS of redis-server)', async () => {
    const stream = 'log:lua';
    const big = 2 * MIB;
    // 100 small entries, then 20 big ones: the chunk that reaches the first big one, sized at the small ones, is 16 long.
    for (let i = 0; i < 100; i++) await redis.xadd(stream, '*', 'v', 'x'.repeat(100));
    for (let i = 0; i < 20; i++) await redis.xadd(stream, '*', 'v', Buffer.alloc(big, 1));
    await EventrailScripts.readBacklog(redis, stream, '0-0', 1, LEAST_BOUND); // the script loaded, out of the way
    // Lua frees what a read copied before anyone can ask INFO; the peak resident set of the server shows it.
    const rise = async (read: () => Promise<unknown>): Promise<number> => {
      resetPeak(server.pid);
      const before = residentBytes(server.pid, 'VmRSS');
      await read();
      return residentBytes(server.pid, 'VmHWM') - before;
    };
    let small: Awaited<ReturnType<typeof EventrailScripts.readBacklog>> | undefined;
    const smallRise = await rise(async () => (small = await EventrailScripts.readBacklog(redis, stream, '0-0', 1000, 4 * MIB)));
    // 100 small entries and the first big one fit 4 MiB; the chunk that brought the big one held up to 15 more.
    expect(small!.entries.length).toBe(101);
    expect(small!.left).toBe(big + small!.entries[100][0].length + 1 + 3 * FRAME);
    // Measured: 64.1 MiB (the chunk's XRANGE reply and Lua's copy of it); the previous script, 6.1 MiB.
    expect(smallRise).toBeGreaterThan(8 * big);
    expect(smallRise).toBeLessThan(2 * 17 * big);
    // From a big entry on, chunks are one entry: the read copies the entry it returns and the one it leaves out.
    const start = small!.entries[100][0].toString();
    let bigRead: Awaited<ReturnType<typeof EventrailScripts.readBacklog>> | undefined;
    const bigRise = await rise(async () => (bigRead = await EventrailScripts.readBacklog(redis, stream, start, 1000, 3 * MIB)));
    expect(bigRead!.entries.length).toBe(1);
    expect(bigRise).toBeLessThan(4 * big + MIB);
    await redis.del(stream);
  });

  // BREAKS (the guarantee's wording): guarantees.md says the chunk past the reply is copied into Lua's
  // memory, "which maxmemory does not count". The chunk's XRANGE reply is built in Redis's own memory
  // first, which used_memory (what maxmemory counts) does count. Measured on fresh Redis 7.0.15 servers,
  // 100 entries of 100 B then 20 of 2 MiB, one read at maxReadBytes 4 MiB from the start (101 entries
  // back): used_memory_peak rose 26.0 MiB over used_memory (the previous one-entry script: 2.4 MiB) and
  // the peak resident set 64.1 MiB (previous: 6.1), the same on 2 of 2 runs. It is freed when the script
  // ends, so no eviction or OOM reply happens meanwhile, but the peak a container sees is 16 x 2 copies
  // of the biggest entry, not the bound. Proposed fix: cap a chunk at what is left of the bound divided
  // by the biggest entry the log admits (an ARGV: maxPayloadBytes with its envelope), not only the
  // biggest seen; or else say in guarantees.md and the runbook that the chunk is counted by used_memory
  // for the moment of the read, and that the peak is about twice the chunk.
  it.skip('a read of small entries then big ones raises the memory maxmemory counts by about its bound, not by a chunk of big ones', async () => {
    const fresh = await startRedisServer();
    const client = new Redis(fresh.port, '127.0.0.1');
    try {
      const big = 2 * MIB;
      for (let i = 0; i < 100; i++) await client.xadd('s', '*', 'v', 'x'.repeat(100));
      for (let i = 0; i < 20; i++) await client.xadd('s', '*', 'v', Buffer.alloc(big, 1));
      const memory = async (): Promise<{ used: number; peak: number }> => {
        const info = await client.info('memory');
        return { used: Number(/used_memory:(\d+)/.exec(info)![1]), peak: Number(/used_memory_peak:(\d+)/.exec(info)![1]) };
      };
      const before = await memory();
      const read = await EventrailScripts.readBacklog(client, 's', '0-0', 1000, 4 * MIB);
      const after = await memory();
      expect(read.entries.length).toBe(101);
      // The reply (4 MiB) and one entry past it, as the one-entry-at-a-time read had it.
      expect(after.peak - before.used).toBeLessThan(4 * MIB + 2 * big);
    } finally {
      client.disconnect();
      await fresh.stop();
    }
  });

  // This broke: the bound counted an entry's bytes (id, names, values) but not what each field costs in the
  // reply, so entries of many empty fields (a foreign producer's malformed entries, which the read must still
  // bring to dead-letter them) made a reply far over maxReadBytes: 1000 entries of 2000 empty fields, counted
  // 15 B each, were one reply of 12,033,020 bytes (184 x the bound of 65,536; Redis 7.0.15). The read now
  // counts FRAME bytes for the id and each field, in the script and in the reader.
  it('keeps a reply of entries with many empty fields within maxReadBytes', async () => {
    const stream = 'log:fields';
    const args: string[] = [];
    for (let f = 0; f < 1000; f++) args.push('', '');
    for (let i = 0; i < 1000; i++) await redis.xadd(stream, '*', ...args);
    const bytes = await replyBytes(server.port, ['EVAL', NEW_LUA, '1', stream, '0-0', '1000', String(LEAST_BOUND)]);
    // A reply's framing beyond the counted bytes is a few bytes per entry, not thousands.
    expect(bytes).toBeLessThanOrEqual(2 * LEAST_BOUND);
    await redis.del(stream);
  });
});

const KEYS = 5;
/** Sequence numbers handled by the group below, in the order its handler finished them. */
const handled: number[] = [];

@Injectable()
class Reader {
  // The least bound and a big batch, so reads go through the script and are cut by bytes.
  @OnEvent(['tiny', 'huge'], { group: 'chunks', ordering: 'key', maxReadBytes: LEAST_BOUND, batchSize: 1000, enableIdempotency: true })
  async handle(message: EventrailMessage<{ n: number }>): Promise<void> {
    // Slow enough that the backlog lasts through the kills.
    await new Promise((resolve) => setTimeout(resolve, 2));
    handled.push(message.data.n);
  }
}

/**
 * A worker draining generated sizes through the chunked script while its reading connection is killed
 * (CLIENT KILL) under reads: what a proxy or a failover does to it.
 */
describe('a worker reading in chunks, its reading connection killed', () => {
  let server: RedisServer;
  let redis: Redis;
  let app: INestApplicationContext | undefined;

  afterEach(async () => {
    await app?.close();
    redis?.disconnect();
    await server?.stop();
  });

  it('CLIENT KILL of the connection that runs the read script, 12 times during a drain of 1 B to 300 KiB entries: every entry, per key in order', async () => {
    handled.length = 0;
    server = await startRedisServer();
    redis = new Redis(server.url);
    const prefix = uniquePrefix('chunks');
    app = await createApp({ redis: server.url, maxPayloadBytes: 4 * MIB, prefix, partitions: 1, autoStart: false }, [Reader]);
    const publisher = app.get(EventrailPublisher);
    const random = seededRandom(77_003);
    const total = 400;
    for (let n = 0; n < total; n++) {
      const bytes = random() < 0.1 ? Math.floor(random() * 300 * KIB) : Math.floor(random() * 200);
      await publisher.publish(bytes > 16 * KIB ? 'huge' : 'tiny', { n, blob: 'x'.repeat(bytes) }, { key: `k${n % KEYS}` });
    }
    await app.get(EventrailConsumers).start();
    // A reading connection is one seen in XREAD; it is killed when its last command is the script.
    const readers = new Set<string>();
    let kills = 0;
    while (kills < 12 && new Set(handled).size < total) {
      const list = String(await redis.client('LIST'));
      for (const line of list.split('\n')) {
        const id = /\bid=(\d+)/.exec(line)?.[1];
        const cmd = /\bcmd=(\S+)/.exec(line)?.[1];
        if (!id || !cmd) continue;
        if (cmd === 'xread') readers.add(id);
        if (readers.has(id) && (cmd === 'evalsha' || cmd === 'eval')) {
          await redis.client('KILL', 'ID', id).catch(() => 0);
          readers.delete(id);
          kills++;
        }
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
    await waitFor(
      () => new Set(handled).size >= total,
      () => `all ${total} handled (${new Set(handled).size}, ${kills} kills)`,
      60_000,
    );
    // Measured: 12 kills, 400 entries handled 400 times.
    expect(kills).toBe(12);
    const firsts = handled.filter((n, i) => handled.indexOf(n) === i);
    expect([...firsts].sort((a, b) => a - b)).toEqual([...Array(total).keys()]);
    for (let k = 0; k < KEYS; k++) {
      const ofKey = firsts.filter((m) => m % KEYS === k);
      expect(ofKey).toEqual([...ofKey].sort((a, b) => a - b));
    }
    // A killed read is dropped and read again from where it started: nothing is handled twice.
    expect(handled.length).toBe(total);
  });

  it('SCRIPT FLUSH 10 times under a drain: the script is sent again, the worker never falls back to XREAD, every entry once, per key in order', async () => {
    handled.length = 0;
    server = await startRedisServer();
    redis = new Redis(server.url);
    const prefix = uniquePrefix('flush');
    app = await createApp({ redis: server.url, maxPayloadBytes: 4 * MIB, prefix, partitions: 1, autoStart: false }, [Reader]);
    const publisher = app.get(EventrailPublisher);
    const random = seededRandom(9_001);
    const total = 400;
    for (let n = 0; n < total; n++) {
      const bytes = random() < 0.1 ? Math.floor(random() * 100 * KIB) : Math.floor(random() * 200);
      await publisher.publish(bytes > 16 * KIB ? 'huge' : 'tiny', { n, blob: 'x'.repeat(bytes) }, { key: `k${n % KEYS}` });
    }
    const warnings: string[] = [];
    jest.spyOn(Logger.prototype, 'warn').mockImplementation((message: unknown) => void warnings.push(String(message)));
    const readBacklog = EventrailScripts.readBacklog.bind(EventrailScripts);
    let scriptReads = 0;
    jest.spyOn(EventrailScripts, 'readBacklog').mockImplementation(async (...args) => {
      const read = await readBacklog(...args);
      scriptReads++;
      return read;
    });
    await app.get(EventrailConsumers).start();
    let flushes = 0;
    let readsAtLastFlush = 0;
    while (flushes < 10 && new Set(handled).size < total) {
      // A flush between script reads, so each one finds its script gone.
      if (scriptReads > readsAtLastFlush) {
        await redis.script('FLUSH');
        readsAtLastFlush = scriptReads;
        flushes++;
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
    await waitFor(
      () => handled.length >= total,
      () => `all ${total} handled (${handled.length}, ${flushes} flushes)`,
      60_000,
    );
    jest.restoreAllMocks();
    expect(flushes).toBe(10);
    expect(scriptReads).toBeGreaterThan(readsAtLastFlush);
    expect(warnings.filter((w) => /XREAD only/.test(w))).toEqual([]);
    expect([...handled].sort((a, b) => a - b)).toEqual([...Array(total).keys()]);
    for (let k = 0; k < KEYS; k++) {
      const ofKey = handled.filter((m) => m % KEYS === k);
      expect(ofKey).toEqual([...ofKey].sort((a, b) => a - b));
    }
  });
});

/**
 * The chunked read on a 3-master Redis Cluster: the script goes through the Cluster client to the node
 * of each partition's stream, whose reading connections the reader does not watch.
 */
describe('a worker reading in chunks on Redis Cluster', () => {
  let cluster: RedisCluster | undefined;
  let app: INestApplicationContext | undefined;

  afterEach(async () => {
    jest.restoreAllMocks();
    await app?.close();
    await cluster?.stop();
  });

  it('drains 3 partitions of 1 B to 300 KiB entries through byte-cut script reads: every entry once, per key in order', async () => {
    handled.length = 0;
    cluster = await startRedisCluster(3);
    const prefix = uniquePrefix('chunks-cluster');
    app = await createApp(
      { redis: { cluster: { nodes: cluster.startupNodes } }, maxPayloadBytes: 4 * MIB, prefix, partitions: 3, autoStart: false },
      [Reader],
    );
    const publisher = app.get(EventrailPublisher);
    const random = seededRandom(31_337);
    const total = 300;
    for (let n = 0; n < total; n++) {
      const bytes = random() < 0.1 ? Math.floor(random() * 300 * KIB) : Math.floor(random() * 200);
      await publisher.publish(bytes > 16 * KIB ? 'huge' : 'tiny', { n, blob: 'x'.repeat(bytes) }, { key: `k${n % KEYS}` });
    }
    const readBacklog = EventrailScripts.readBacklog.bind(EventrailScripts);
    const cut: number[] = [];
    jest.spyOn(EventrailScripts, 'readBacklog').mockImplementation(async (...args) => {
      const read = await readBacklog(...args);
      if (read.left > 0) cut.push(read.entries.length);
      return read;
    });
    await app.get(EventrailConsumers).start();
    await waitFor(
      () => handled.length >= total,
      () => `all ${total} handled (${handled.length})`,
      60_000,
    );
    expect([...handled].sort((a, b) => a - b)).toEqual([...Array(total).keys()]);
    for (let k = 0; k < KEYS; k++) {
      const ofKey = handled.filter((m) => m % KEYS === k);
      expect(ofKey).toEqual([...ofKey].sort((a, b) => a - b));
    }
    // The script did the reading, and the bound cut some of its reads.
    expect(cut.length).toBeGreaterThan(3);
  }, 120_000);
});
