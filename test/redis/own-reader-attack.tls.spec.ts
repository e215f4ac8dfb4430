import { Injectable } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailConsumers, EventrailMessage, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { readsWithRespReader } from '../../lib/redis/own-reply-reader';
import { RespReader } from '../../lib/redis/resp-reader';
import { partitionForKey } from '../../lib/wire/partitioner';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { freePort, RedisServer, startRedisServer } from '../support/redis-server';
import { makeTlsFiles, TlsFiles, tlsServerArgs } from '../support/tls-certs';

const KIB = 1024;
const MIB = 1024 * KIB;
const EVENT = 'tls.bulk';
const handled: Array<{ key: string; n: number }> = [];

@Injectable()
class Reader {
  @OnEvent(EVENT, 'tls-own-reader')
  handle(message: EventrailMessage<{ n: number }>): void {
    handled.push({ key: message.key ?? '', n: message.data.n });
  }
}

/**
 * The own reply reader over TLS: TLS hands a socket's replies over in records of at most 16 KiB, cut
 * elsewhere than TCP does. A worker's read connections must still be read by `RespReader` there, and
 * a drain of CR/LF entries over 64 KiB and over 1 MiB, with its read connections killed in the middle
 * of replies, must hand every event at least once, in order per key, and commit each partition's end.
 */
describe('own reply reader over TLS', () => {
  let files: TlsFiles;
  let server: RedisServer;
  let tlsPort: number;
  let admin: Redis;

  beforeAll(async () => {
    files = await makeTlsFiles();
    tlsPort = await freePort();
    server = await startRedisServer(undefined, tlsServerArgs(files, tlsPort, false));
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    admin?.disconnect();
    await server?.stop();
    files?.remove();
  });

  it('reads a drain of big CR/LF entries with RespReader, through kills in the middle of replies', async () => {
    const partitions = 3;
    const prefix = uniquePrefix('tls-own');
    const keys = new EventrailKeys(prefix, partitions);
    // Entries appended raw, before eventrail first starts on the log: none indexed, the byte-counting script reads them.
    const keyNames = Array.from({ length: 6 }, (_, k) => `k${k}\r\n*1\r\n`);
    const expected: Array<{ key: string; n: number }> = [];
    for (let i = 0; i < 60; i++) {
      const key = keyNames[i % keyNames.length];
      const n = Math.floor(i / keyNames.length) + 1;
      const bytes = i % 10 === 3 ? MIB + 100 * KIB : i % 4 === 1 ? 70 * KIB : 200;
      const data = `{\r\n"n":${n},\r\n"blob":"${'\\r\\n'.repeat(Math.floor(bytes / 4))}"\r\n}`;
      await admin.xadd(keys.stream(partitionForKey(key, partitions)), '*', 'event', EVENT, 'key', key, 'data', data);
      expected.push({ key, n });
    }

    let bytes = 0;
    let largestChunk = 0;
    let kills = 0;
    let killing = false;
    const connections: Redis[] = [];
    const ownConnections = new Set<Redis>();
    const write = RespReader.prototype.write;
    jest.spyOn(RespReader.prototype, 'write').mockImplementation(function (this: RespReader, chunk: Buffer) {
      bytes += chunk.length;
      largestChunk = Math.max(largestChunk, chunk.length);
      write.call(this, chunk);
      const cut = (this as unknown as { partialBulk?: { length: number } }).partialBulk;
      if (cut && cut.length > 64 * KIB && !killing && kills < 5) {
        killing = true;
        kills++;
        void (async () => {
          for (const connection of connections) {
            const port = (connection as unknown as { stream?: { localPort?: number } }).stream?.localPort;
            if (connection.status === 'ready' && port) await admin.client('KILL', 'ADDR', `127.0.0.1:${port}`).catch(() => undefined);
          }
        })().finally(() => (killing = false));
      }
    });
    const duplicate = EventrailRedis.prototype.duplicateForReads;
    jest.spyOn(EventrailRedis.prototype, 'duplicateForReads').mockImplementation(function (this: EventrailRedis) {
      const connection = duplicate.call(this) as Redis;
      connections.push(connection);
      connection.on('ready', () => {
        if (readsWithRespReader(connection)) ownConnections.add(connection);
      });
      return connection;
    });

    const app = await createApp(
      {
        redis: { host: '127.0.0.1', port: tlsPort, tls: { ca: files.read(files.caCert) } },
        prefix,
        partitions,
        consumer: { lockTtlMs: 3_000 },
      },
      [Reader],
    );
    try {
      await app.get(EventrailConsumers).start();
      await waitFor(
        async () => {
          for (let p = 0; p < partitions; p++) {
            const last = (await admin.xrevrange(keys.stream(p), '+', '-', 'COUNT', 1))[0]?.[0] ?? null;
            if ((await admin.get(keys.offset('tls-own-reader', p))) !== last) return false;
          }
          return true;
        },
        () => `each partition committed at its end (${handled.length} handled, ${kills} kills)`,
        50_000,
        100,
      );
    } finally {
      await app.close();
      jest.restoreAllMocks();
    }

    // The own reader read the TLS sockets (in TLS records, never more than 16 KiB a chunk).
    expect(ownConnections.size).toBeGreaterThan(0);
    expect(bytes).toBeGreaterThan(4 * MIB);
    expect(largestChunk).toBeLessThanOrEqual(16 * KIB);
    expect(kills).toBeGreaterThanOrEqual(2);
    // Every event, in order per key (a replay may repeat, never skip ahead).
    const seen = new Map<string, Set<number>>();
    const violations: string[] = [];
    for (const { key, n } of handled) {
      const done = seen.get(key) ?? new Set<number>();
      seen.set(key, done);
      if (!done.has(n)) for (let m = 1; m < n; m++) if (!done.has(m)) violations.push(`${JSON.stringify(key)} #${n} before #${m}`);
      done.add(n);
    }
    expect(violations).toEqual([]);
    expect(expected.filter(({ key, n }) => !seen.get(key)?.has(n))).toEqual([]);
  });
});
