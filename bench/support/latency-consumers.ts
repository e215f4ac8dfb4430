import Redis from 'ioredis';
import { createWorker, runWorker } from './bullmq';
import { createEventrailApp, startConsumers } from './eventrail-app';
import { BenchPayload } from './payload';

export type LatencySystem = 'eventrail' | 'raw' | 'bullmq';

type XReadReply = Array<[string, Array<[string, string[]]>]> | null;

/** A consumer of the latency scenario: `record` is called with each payload as its handler starts. */
export interface LatencyConsumer {
  /** Resolves once the consumer waits for events. */
  start(): Promise<void>;
  close(): Promise<void>;
}

export async function createLatencyConsumer(
  url: string,
  prefix: string,
  system: LatencySystem,
  stream: string,
  record: (payload: BenchPayload) => void,
): Promise<LatencyConsumer> {
  switch (system) {
    case 'eventrail': {
      const app = await createEventrailApp({ url, prefix, handler: async (message) => record(message.data) });
      return { start: () => startConsumers(app), close: () => app.close() };
    }
    case 'bullmq': {
      const worker = createWorker(url, prefix, 1, async (job) => record(job.data));
      return {
        start: async () => {
          await worker.waitUntilReady();
          runWorker(worker);
        },
        close: () => worker.close(),
      };
    }
    case 'raw':
      return rawConsumer(url, stream, record);
  }
}

/** `XREAD BLOCK` from the last id seen, `JSON.parse` and an awaited no-op per entry, like the drain reference. */
function rawConsumer(url: string, stream: string, record: (payload: BenchPayload) => void): LatencyConsumer {
  const client = new Redis(url);
  let running = true;
  let loop: Promise<void> = Promise.resolve();
  const noop = async (): Promise<void> => undefined;
  const run = async (): Promise<void> => {
    let last = '0-0';
    while (running) {
      const reply = (await client.xread('COUNT', 500, 'BLOCK', 1000, 'STREAMS', stream, last)) as XReadReply;
      for (const [id, fields] of reply?.[0][1] ?? []) {
        for (let i = 0; i < fields.length; i += 2) if (fields[i] === 'data') record(JSON.parse(fields[i + 1]) as BenchPayload);
        await noop();
        last = id;
      }
    }
  };
  return {
    start: async () => {
      await client.ping();
      loop = run();
    },
    close: async () => {
      running = false;
      client.disconnect();
      await loop.catch(() => undefined);
    },
  };
}
