// The latency scenario's producer: appends events at a steady rate, each
// payload carrying the time its publish call started, through eventrail, raw
// XADD or BullMQ, so the consumer measures publish-to-handler-start. `start`
// sends `durationMs` worth of events; `send` (the interleaved rounds) a given
// number. Each reports `done` with the CPU time it took.
import Redis from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventrailPublisher } from '../../lib';
import { createQueue, JOB_OPTIONS } from '../support/bullmq';
import { childConfig, cpuMs, onCommands, report, runChild } from '../support/children';
import { createEventrailApp } from '../support/eventrail-app';
import { BENCH_EVENT, BenchPayload, hostNow, makePayload, minimalFields } from '../support/payload';

export interface LatencyProducerConfig {
  url: string;
  prefix: string;
  system: 'eventrail' | 'raw' | 'bullmq';
  /** Raw XADD appends to this stream. */
  stream: string;
  ratePerSecond: number;
  /** What `start` sends; `send` commands give their own count. */
  durationMs: number;
}

interface Sender {
  send(payload: BenchPayload): Promise<unknown>;
  close(): Promise<unknown>;
}

async function connect(config: LatencyProducerConfig): Promise<Sender> {
  switch (config.system) {
    case 'eventrail': {
      const app = await createEventrailApp({ url: config.url, prefix: config.prefix });
      const publisher = app.get(EventrailPublisher);
      return { send: (payload) => publisher.publish(BENCH_EVENT, payload), close: () => app.close() };
    }
    case 'raw': {
      const client = new Redis(config.url);
      await client.ping();
      return { send: (payload) => client.xadd(config.stream, '*', ...minimalFields(JSON.stringify(payload))), close: () => client.quit() };
    }
    case 'bullmq': {
      const queue = createQueue(config.url, config.prefix);
      await queue.waitUntilReady();
      return { send: (payload) => queue.add(BENCH_EVENT, payload, JOB_OPTIONS), close: () => queue.close() };
    }
  }
}

/**
 * Sends `total` events on schedule at `ratePerSecond`: a 1 ms timer wakes the loop, which
 * sends every event that is due (about two a tick at 2000/s), without waiting
 * for earlier sends, so a slow reply never delays the schedule.
 */
async function produce(sender: Sender, ratePerSecond: number, total: number): Promise<number> {
  const intervalMs = 1000 / ratePerSecond;
  // Sends are counted, not kept: holding every send's promise (and its result) until the end would
  // make the producer's heap, and its GC pauses, grow with the run, more for bigger results.
  let outstanding = 0;
  let failure: unknown;
  let allAnswered: () => void = () => undefined;
  const answered = (): void => {
    if (--outstanding === 0) allAnswered();
  };
  const failed = (error: unknown): void => {
    failure ??= error;
    answered();
  };
  const started = performance.now();
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor((performance.now() - started) / intervalMs) + 1);
    for (; sent < due; sent++) {
      outstanding++;
      sender.send(makePayload(hostNow())).then(answered, failed);
    }
    await sleep(1);
  }
  if (outstanding > 0) await new Promise<void>((resolve) => (allAnswered = resolve));
  if (failure) throw failure;
  return sent;
}

async function main(): Promise<void> {
  const config = childConfig<LatencyProducerConfig>();
  const sender = await connect(config);
  const sendTimed = async (total: number): Promise<void> => {
    const cpuStart = process.cpuUsage();
    const sent = await produce(sender, config.ratePerSecond, total);
    report({ type: 'done', sent, cpuMs: cpuMs(cpuStart) });
  };
  onCommands({
    start: () => sendTimed(Math.round((config.ratePerSecond * config.durationMs) / 1000)),
    send: ({ events }) => sendTimed(events),
    stop: async () => {
      await sender.close();
      process.exit(0);
    },
  });
}

runChild(main);
