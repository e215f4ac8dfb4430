// The latency scenario's consumer, in a process of its own (as an app runs
// it): handles the producer's events with eventrail, the raw XREAD BLOCK loop
// or BullMQ, takes each handler start's time on the host's monotonic clock,
// and reports p50 / p99 / max of publish call to handler start once it has
// seen `expected` events after the `warmup` ones (or, told to stop first,
// what it has). Told to `await` a number of events, it reports `progress` once
// it has handled that many in all, warm-up included (the interleaved rounds
// wait for it before the other system's turn). LATENCY_DUMP=<file> also
// writes each measured event's send time and latency (ms, one line each) to
// <file>.<system> (the interleaved rounds run two consumers), to see when the
// slow ones came, and a third column: the time from the last socket 'data'
// event of the process (the read's reply arriving) to the handler's start, which
// splits a latency into before the reply reached the process and in the process.
import { writeFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { childConfig, cpuMs, onCommands, report, runChild } from '../support/children';
import { createLatencyConsumer, LatencySystem } from '../support/latency-consumers';
import { BenchPayload, hostNow } from '../support/payload';
import { percentile } from '../support/stats';

export interface LatencyConsumerConfig {
  url: string;
  prefix: string;
  system: LatencySystem;
  stream: string;
  /** The first `warmup` events are handled but not measured. */
  warmup: number;
  expected: number;
}

const DUMP = process.env.LATENCY_DUMP;
/** With LATENCY_DUMP: when the last 'data' event of any socket of this process was emitted (`hostNow()`). */
let lastData = 0;
if (DUMP) {
  const emit = Socket.prototype.emit as (this: Socket, event: string | symbol, ...args: unknown[]) => boolean;
  Socket.prototype.emit = function (this: Socket, event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'data') lastData = hostNow();
    return emit.call(this, event, ...args);
  };
}

async function main(): Promise<void> {
  const config = childConfig<LatencyConsumerConfig>();
  const samples = new Float64Array(config.expected);
  let count = 0;
  let reported = false;
  let skipped = 0;
  /** Events handled in all, warm-ups included. */
  let handled = 0;
  /** An `await` command's count, and what it waits on. */
  let awaited = Infinity;
  let reached: () => void = () => undefined;
  const arrivals = new Float64Array(config.expected);
  const inProcess = new Float64Array(config.expected);
  const finish = (): void => {
    if (reported) return;
    reported = true;
    if (DUMP)
      writeFileSync(
        `${DUMP}.${config.system}`,
        Array.from(samples.subarray(0, count), (v, i) => `${arrivals[i].toFixed(3)} ${v.toFixed(3)} ${inProcess[i].toFixed(3)}`).join('\n'),
      );
    const seen = Array.from(samples.subarray(0, count));
    report({
      type: 'latency',
      count,
      p50: percentile(seen, 50),
      p99: percentile(seen, 99),
      max: percentile(seen, 100),
      cpuMs: cpuMs(cpuStart),
    });
  };
  const consumer = await createLatencyConsumer(config.url, config.prefix, config.system, config.stream, (payload: BenchPayload) => {
    handled++;
    if (skipped < config.warmup) skipped++;
    else if (count < config.expected) {
      const now = hostNow();
      if (DUMP) {
        arrivals[count] = payload.sentAt;
        inProcess[count] = now - lastData;
      }
      samples[count++] = now - payload.sentAt;
      if (count === config.expected) finish();
    }
    if (handled >= awaited) {
      awaited = Infinity;
      reached();
    }
  });
  await consumer.start();
  const cpuStart = process.cpuUsage();
  onCommands({
    start: async () => undefined,
    await: async (command) => {
      if (handled < command.handled) {
        awaited = command.handled;
        await new Promise<void>((resolve) => (reached = resolve));
      }
      report({ type: 'progress', handled, lastAt: hostNow() });
    },
    stop: async () => {
      finish();
      await consumer.close();
      process.exit(0);
    },
  });
}

runChild(main);
