/**
 * A publisher of a rolling deploy, for append-transaction-rolling.e2e.spec.ts:
 * an "old" one, whose `publishMany` and coalesced `publish` calls go as runs
 * and single XADDs (its connection has a `reconnectOnError`, where no
 * transaction can go), or a "new" one (transactions). Both publish the same
 * workload into the same log and keys: `publishMany` calls of 2-200 events
 * (and sometimes 1001-1200, which go as runs either way) and bursts of
 * concurrent `publish` calls made in one tick, up to 3 calls in flight.
 *
 * Each event's data says who sent it and where in which call (`RollData`), and
 * each call's outcome is reported (`RollReport`): the parent counts an event as
 * acknowledged only once that report reached it, so a SIGKILL loses nothing
 * the parent counted.
 *
 * Run as `node -r @swc-node/register test/publisher/support/rolling-publisher.ts`
 * with an IPC channel (`ROLL_*` environment below); the test imports
 * `RollingWorkload` to run the same workload in its own process too.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Redis } from 'ioredis';
import { EventrailModule, EventrailPublisher, partitionForKey, PublishInput, PublishManyError } from '../../../lib';
import { leanTransactionsAvailable } from '../../../lib/redis/lean-command';
import type { EventrailRedis } from '../../../lib/redis/eventrail-redis';
import { seededRandom } from '../../support/seeded-random';

export const ROLL_EVENT = 'roll';
export const ROLL_KEYS = 12;
const MAX_IN_FLIGHT = 3;

export type RollMode = 'old' | 'new';
export type RollOutcome = 'appended' | 'not-appended' | 'unknown';

/** What each event carries: publisher, call, index in the call, the call's size, and the publisher's call-order sequence. */
export interface RollData {
  w: string;
  c: number;
  i: number;
  n: number;
  s: number;
  pad: string;
}

/** One call's outcome: per event, what it came to, and where it landed when appended. */
export interface RollReport {
  w: string;
  c: number;
  kind: 'many' | 'burst';
  n: number;
  outcomes: RollOutcome[];
  /** `[partition, offset, id]` of each appended event, else null. */
  results: Array<[number, string, string] | null>;
  /** Error class names seen, for the failure message. */
  errors: string[];
}

export type RollMessage =
  { type: 'ready'; pid: number; transactions: boolean } | { type: 'report'; report: RollReport } | { type: 'stopped' };

export type RollCommand = { cmd: 'budget'; calls: number } | { cmd: 'stop' };

/** The key of event `i` of call `c` (the same for every publisher, so all of them write the same keys and partitions). */
export function keyOf(c: number, i: number): string {
  return `k${(c * 31 + i * 7) % ROLL_KEYS}`;
}

/** The Redis options of a publisher of `mode`: an old one's connection cannot take a transaction. */
export function rollRedisOptions(url: string, mode: RollMode): Record<string, unknown> {
  const { hostname, port } = new URL(url);
  return { host: hostname, port: Number(port), ...(mode === 'old' ? { reconnectOnError: () => false } : {}) };
}

/** Whether `publisher`'s connection takes transactions now. */
export function takesTransactions(publisher: EventrailPublisher): boolean {
  return leanTransactionsAvailable((publisher as unknown as { redis: EventrailRedis }).redis.client as Redis);
}

/**
 * The workload of one publisher: calls until `budget` calls were started (the
 * parent raises it), at most `MAX_IN_FLIGHT` at once, each reported when it settled.
 */
export class RollingWorkload {
  private budget = 0;
  private started = 0;
  private seq = 0;
  private stopped = false;
  private refused = false;
  private wake?: () => void;
  private readonly random: () => number;
  readonly finished: Promise<void>;

  constructor(
    private readonly publisher: EventrailPublisher,
    private readonly name: string,
    seed: number,
    private readonly report: (report: RollReport) => void,
  ) {
    this.random = seededRandom(seed);
    this.finished = this.run();
  }

  /** Lets it start calls until `calls` were started in all. */
  raise(calls: number): void {
    this.budget = Math.max(this.budget, calls);
    this.wake?.();
  }

  /** Starts no more calls; `finished` resolves once the ones in flight settled. */
  stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    return this.finished;
  }

  private async run(): Promise<void> {
    const inFlight = new Set<Promise<void>>();
    while (!this.stopped) {
      if (this.started >= this.budget || inFlight.size >= MAX_IN_FLIGHT) {
        const woken = new Promise<void>((resolve) => (this.wake = resolve));
        await (inFlight.size > 0 ? Promise.race([...inFlight, woken]) : woken);
        this.wake = undefined;
        continue;
      }
      // After a call refused whole (the connection down), the next one waits for the reconnect: refusals would
      // use the budget up in a moment.
      if (this.refused) await this.connected();
      this.refused = false;
      const call = this.call(this.started++).then((report) => void (this.refused ||= report.outcomes.every((o) => o !== 'appended')));
      inFlight.add(call);
      void call.finally(() => inFlight.delete(call));
    }
    await Promise.all(inFlight);
  }

  /** Resolves once the publisher's connection is ready. */
  private connected(): Promise<void> {
    const client = (this.publisher as unknown as { redis: EventrailRedis }).redis.client as Redis;
    if (client.status === 'ready') return new Promise((resolve) => setImmediate(resolve));
    return new Promise((resolve) => client.once('ready', () => resolve()));
  }

  private inputs(c: number, n: number): PublishInput[] {
    return Array.from({ length: n }, (_, i) => {
      const data: RollData = { w: this.name, c, i, n, s: this.seq++, pad: 'x'.repeat(Math.floor(this.random() * 160)) };
      return { event: ROLL_EVENT, data, key: keyOf(c, i) };
    });
  }

  private async call(c: number): Promise<RollReport> {
    const report = await this.made(c);
    this.report(report);
    return report;
  }

  private async made(c: number): Promise<RollReport> {
    const r = this.random();
    if (r < 0.42) {
      // A burst: concurrent publish() calls made in one tick (the first goes alone, the rest coalesced).
      const inputs = this.inputs(c, 2 + Math.floor(this.random() * 29));
      const calls = inputs.map((input) => this.publisher.publish(ROLL_EVENT, input.data, { key: input.key }));
      const settled = await Promise.allSettled(calls);
      return {
        w: this.name,
        c,
        kind: 'burst',
        n: inputs.length,
        outcomes: settled.map((s) => (s.status === 'fulfilled' ? 'appended' : 'unknown')),
        results: settled.map((s) => (s.status === 'fulfilled' ? [s.value.partition, s.value.offset, s.value.id] : null)),
        errors: [...new Set(settled.flatMap((s) => (s.status === 'rejected' ? [errorName(s.reason)] : [])))],
      };
    }
    const n = r < 0.92 ? 2 + Math.floor(this.random() * 199) : 1001 + Math.floor(this.random() * 200);
    const inputs = this.inputs(c, n);
    const out = await this.publisher.publishMany(inputs).then(
      (results) => results,
      (error: unknown) => error,
    );
    if (Array.isArray(out)) {
      return {
        w: this.name,
        c,
        kind: 'many',
        n,
        outcomes: inputs.map(() => 'appended'),
        results: out.map((r) => [r.partition, r.offset, r.id]),
        errors: [],
      };
    }
    if (out instanceof PublishManyError) {
      return {
        w: this.name,
        c,
        kind: 'many',
        n,
        outcomes: [...out.outcomes] as RollOutcome[],
        results: inputs.map((_, i) => {
          const result = out.results[i];
          return out.outcomes[i] === 'appended' && result ? [result.partition, result.offset, result.id] : null;
        }),
        errors: [errorName(out), errorName(out.cause), String((out.cause as Error | undefined)?.message).slice(0, 160)],
      };
    }
    return {
      w: this.name,
      c,
      kind: 'many',
      n,
      outcomes: inputs.map(() => 'unknown'),
      results: inputs.map(() => null),
      errors: [errorName(out)],
    };
  }
}

function errorName(error: unknown): string {
  return error instanceof Error ? `${error.constructor.name}: ${error.message.slice(0, 120)}` : String(error);
}

/** The partition of event `i` of call `c` in a log of `partitions`. */
export function partitionOf(c: number, i: number, partitions: number): number {
  return partitionForKey(keyOf(c, i), partitions);
}

// ---------------------------------------------------------------------------------------------
// As a child process
// ---------------------------------------------------------------------------------------------

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`rolling-publisher: ${name} is not set`);
  return value;
}

function send(message: RollMessage): Promise<void> {
  if (!process.connected) return Promise.resolve();
  return new Promise((resolve) => process.send?.(message, undefined, {}, () => resolve()));
}

async function main(): Promise<void> {
  const mode = required('ROLL_MODE') as RollMode;
  const name = required('ROLL_NAME');

  @Module({
    imports: [
      EventrailModule.forRoot({
        redis: rollRedisOptions(required('ROLL_REDIS_URL'), mode),
        prefix: required('ROLL_PREFIX'),
        partitions: Number(required('ROLL_PARTITIONS')),
        publishTimeoutMs: 8_000,
      }),
    ],
  })
  class PublisherModule {}

  const app = await NestFactory.createApplicationContext(PublisherModule, { logger: ['error'] });
  const publisher = app.get(EventrailPublisher);
  // The first publishMany asks whether scripts run here (and holds its keys' later calls meanwhile): asked first.
  await publisher.publishMany([0, 1].map((n) => ({ event: 'warm', data: { n, name }, partition: 0 })));
  const workload = new RollingWorkload(publisher, name, Number(required('ROLL_SEED')), (report) => void send({ type: 'report', report }));
  process.on('message', (command: RollCommand) => {
    if (command.cmd === 'budget') workload.raise(command.calls);
    else
      void workload
        .stop()
        .then(() => send({ type: 'stopped' }))
        .then(() => app.close())
        .then(() => process.exit(0));
  });
  process.on('disconnect', () => process.exit(1));
  await send({ type: 'ready', pid: process.pid, transactions: takesTransactions(publisher) });
}

if (require.main === module) {
  main().catch((error: unknown) => {
    console.error('rolling-publisher failed:', error);
    process.exit(1);
  });
}
