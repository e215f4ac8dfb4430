// What the reply decoder costs a reader of the log: the same backlog of eventrail entries (the bench's
// payload, keyed, 1000 per publishMany) read with XREAD COUNT n and prefetch, every entry decoded as a
// partition worker decodes it (readEntryBuffers) and its data parsed, through ioredis's xreadBuffer and
// through a plain socket read by RespReader. Alternating rounds; prints each round's rate and client CPU.
//
//   node -r @swc-node/register bench/tools/own-parser-drain.ts [count] [events]
import { connect, type Socket } from 'node:net';
import Redis from 'ioredis';
import { RespReader, type RespValue } from '../../lib/redis/resp-reader';
import { readEntryBuffers } from '../../lib/wire/entry-reader';
import { EventrailKeys } from '../../lib/redis/keys';
import { createEventrailApp, fillLog } from '../support/eventrail-app';
import { startRedisServer } from '../support/redis-server';

type Entries = Array<[Buffer, Buffer[]]>;

/** A socket to Redis whose replies RespReader reads; one call at a time in flight is all the drain needs. */
class PlainConnection {
  private readonly waiting: Array<(reply: RespValue) => void> = [];
  private readonly socket: Socket;
  private readonly reader = new RespReader((reply) => this.waiting.shift()!(reply));

  constructor(port: number) {
    this.socket = connect(port, '127.0.0.1');
    this.socket.setNoDelay(true);
    this.socket.on('data', (chunk: Buffer) => this.reader.write(chunk));
  }

  call(args: string[]): Promise<RespValue> {
    let text = `*${args.length}\r\n`;
    for (const arg of args) text += `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`;
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.socket.write(text);
    });
  }

  close(): void {
    this.socket.destroy();
  }
}

async function drain(
  total: number,
  origin: { partition: number; logTag: string },
  read: (after: string) => Promise<Entries>,
): Promise<{ rate: number; cpuUs: number }> {
  let after = '0-0';
  let handled = 0;
  let sum = 0;
  const cpu = process.cpuUsage();
  const started = performance.now();
  let next = read(after);
  while (handled < total) {
    const entries = await next;
    after = entries[entries.length - 1][0].toString('latin1');
    next = read(after);
    for (const [id, fields] of entries) {
      const entry = readEntryBuffers(id, fields, origin);
      if ('data' in entry) sum += (JSON.parse(entry.data as string) as { n?: number }).n ?? 1;
      handled++;
    }
  }
  await next;
  const ms = performance.now() - started;
  const used = process.cpuUsage(cpu);
  if (sum === 0) throw new Error('nothing parsed');
  return { rate: Math.round((handled / ms) * 1000), cpuUs: (used.user + used.system) / handled };
}

async function main(): Promise<void> {
  const count = Number(process.argv[2] ?? 500);
  const total = Number(process.argv[3] ?? 200_000);
  const redis = await startRedisServer('none');
  const port = Number(new URL(redis.url).port);
  const app = await createEventrailApp({ url: redis.url, prefix: 'own' });
  await fillLog(app, total, 1000);
  const keys = new EventrailKeys('own', 1);
  const stream = keys.stream(0);
  const origin = { partition: 0, logTag: keys.logTag };
  const io = new Redis(redis.url);
  const plain = new PlainConnection(port);
  const viaIoredis = (after: string): Promise<Entries> =>
    io
      .xreadBuffer('COUNT', count, 'STREAMS', stream, after)
      .then((reply) => (reply ? (reply as unknown as Array<[Buffer, Entries]>)[0][1] : []));
  const viaReader = (after: string): Promise<Entries> =>
    plain
      .call(['XREAD', 'COUNT', String(count), 'STREAMS', stream, after])
      .then((reply) => (reply ? (reply as unknown as Array<[Buffer, Entries]>)[0][1] : []));
  for (let round = 0; round < 6; round++) {
    const order = round % 2 === 0 ? (['ioredis', 'reader'] as const) : (['reader', 'ioredis'] as const);
    for (const name of order) {
      const result = await drain(total, origin, name === 'ioredis' ? viaIoredis : viaReader);
      console.log(`round ${round} ${name.padEnd(8)} ${result.rate} events/s, ${result.cpuUs.toFixed(2)} µs client CPU an event`);
    }
  }
  plain.close();
  io.disconnect();
  await app.close();
  await redis.stop();
}

void main();
