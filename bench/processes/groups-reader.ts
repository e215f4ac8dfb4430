// The groups scenario's reading process: `groups` eventrail consumer groups
// (no-op handlers), or as many raw readers, over a prefilled log. Reading
// starts on the parent's "start"; once every group or reader has handled the
// whole backlog it reports `done` with the events handled in all and its own
// CPU time. Its Redis connections carry the client name the parent gives, so
// the parent counts them with CLIENT LIST.
import { Injectable, Type } from '@nestjs/common';
import Redis, { RedisOptions } from 'ioredis';
import { OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { childConfig, cpuMs, onCommands, report, runChild } from '../support/children';
import { createEventrailApp, startConsumers } from '../support/eventrail-app';
import { BENCH_EVENT } from '../support/payload';
import { connectionOptions } from '../support/redis-tools';
import { GroupsReaderConfig, groupNames, RAW_COUNT } from '../scenarios/groups';

type XReadBufferReply = Array<[Buffer, Array<[Buffer, Buffer[]]>]> | null;

/** Counts each group's handled events and resolves once every group has handled `events`. */
class Tally {
  readonly handled: number[];
  private left: number;
  private resolve!: () => void;
  readonly finished = new Promise<void>((resolve) => (this.resolve = resolve));

  constructor(
    groups: number,
    private readonly events: number,
  ) {
    this.handled = new Array<number>(groups).fill(0);
    this.left = groups;
  }

  hit(group: number, count = 1): void {
    const before = this.handled[group];
    this.handled[group] += count;
    if (before < this.events && this.handled[group] >= this.events && --this.left === 0) this.resolve();
  }

  get total(): number {
    return this.handled.reduce((sum, n) => sum + n, 0);
  }
}

/** Connection options of the URL (ioredis's default retries), named so the parent can find this process's connections. */
function namedOptions(url: string, connectionName: string): RedisOptions {
  return { ...connectionOptions(url), maxRetriesPerRequest: 20, connectionName };
}

/** A handler class of its own per group: the decorator takes the group name when the class is made. */
function groupConsumer(group: string, index: number, tally: Tally): Type<unknown> {
  @Injectable()
  class GroupConsumer {
    @OnEvent(BENCH_EVENT, group)
    async handle(): Promise<void> {
      tally.hit(index);
    }
  }
  return GroupConsumer;
}

async function eventrailReaders(config: GroupsReaderConfig, tally: Tally): Promise<void> {
  const app = await createEventrailApp({
    url: config.url,
    redis: namedOptions(config.url, config.clientName),
    prefix: config.prefix,
    partitions: config.partitions,
    consumer: { concurrency: config.partitions, packedBacklogReads: config.mode === 'packed' },
    providers: groupNames(config.groups).map((group, g) => groupConsumer(group, g, tally)),
  });
  onCommands({
    start: async () => {
      const started = process.cpuUsage();
      await startConsumers(app);
      await tally.finished;
      report({ type: 'done', sent: tally.total, cpuMs: cpuMs(started) });
    },
    stop: async () => {
      await app.close();
      process.exit(0);
    },
  });
}

/**
 * One raw reader: `XREAD COUNT n` over every partition's stream on one
 * connection, asking for the next batch before it handles the current one
 * (the reply tells the next ids), `JSON.parse` of `data` and an awaited no-op
 * per entry, as the drain scenario's reference does. It commits nothing.
 */
async function rawReader(client: Redis, streams: string[], events: number, hit: (count: number) => void): Promise<void> {
  const ids = streams.map(() => '0-0');
  const index = new Map(streams.map((s, i) => [s, i]));
  const read = (): Promise<XReadBufferReply> =>
    client.xreadBuffer('COUNT', RAW_COUNT, 'STREAMS', ...streams, ...ids) as Promise<XReadBufferReply>;
  const noop = async (_data: unknown): Promise<void> => undefined;
  let handled = 0;
  let pending: Promise<XReadBufferReply> | undefined = read();
  while (handled < events) {
    const reply: XReadBufferReply = await (pending as Promise<XReadBufferReply>);
    if (!reply) throw new Error(`raw reader: the log ended after ${handled} of ${events} entries`);
    for (const [stream, entries] of reply) ids[index.get(stream.toString()) as number] = entries[entries.length - 1][0].toString();
    const batch = reply.reduce((sum, [, entries]) => sum + entries.length, 0);
    pending = handled + batch < events ? read() : undefined;
    for (const [, entries] of reply) {
      for (const [, fields] of entries) {
        let data: Buffer | undefined;
        for (let i = 0; i < fields.length; i += 2) {
          if (fields[i].length === 4 && fields[i].toString('latin1') === 'data') data = fields[i + 1];
        }
        await noop(JSON.parse((data as Buffer).toString('utf8')));
      }
    }
    handled += batch;
    hit(batch);
  }
}

async function rawReaders(config: GroupsReaderConfig, tally: Tally): Promise<void> {
  const keys = new EventrailKeys(config.prefix, config.partitions);
  const streams = Array.from({ length: config.partitions }, (_, p) => keys.stream(p));
  const clients = Array.from({ length: config.groups }, () => new Redis(namedOptions(config.url, config.clientName)));
  await Promise.all(clients.map((c) => c.ping()));
  onCommands({
    start: async () => {
      const started = process.cpuUsage();
      await Promise.all(clients.map((client, g) => rawReader(client, streams, config.events, (count) => tally.hit(g, count))));
      report({ type: 'done', sent: tally.total, cpuMs: cpuMs(started) });
    },
    stop: async () => {
      for (const client of clients) client.disconnect();
      process.exit(0);
    },
  });
}

async function main(): Promise<void> {
  const config = childConfig<GroupsReaderConfig>();
  const tally = new Tally(config.groups, config.events);
  if (config.mode === 'raw') await rawReaders(config, tally);
  else await eventrailReaders(config, tally);
}

runChild(main);
