/**
 * Worker process of the chaos suites, of test/consumer/crash-loop.e2e.spec.ts and of
 * the fault schedules in test/faults/ (mode `fuzz`, fuzz-handlers.ts): a
 * small Nest app whose handlers leave their records in Redis (so they survive
 * the process) and crash it for real with SIGKILL where the mode says so.
 * Run as `node -r @swc-node/register test/faults/support/chaos-worker.ts` with
 * an IPC channel; supervisor.ts spawns it with the environment from
 * `chaosWorkerEnv`.
 */
import 'reflect-metadata';
import { Injectable, Module, OnModuleDestroy, Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { ConsumerOptions, EventrailConsumers, EventrailMessage, EventrailModule, OnEvent } from '../../../lib';
import { fuzzProviders } from './fuzz-handlers';
import { ChaosMode, chaosKeys, ChaosWorkerCommand, ChaosWorkerMessage, encodeHandling, EVENTS, GROUPS } from './chaos-protocol';

const MODE = required('CHAOS_MODE') as ChaosMode;
const PREFIX = required('EVENTRAIL_PREFIX');
const REDIS_URL = required('EVENTRAIL_REDIS_URL');
const PARTITIONS = Number(required('CHAOS_PARTITIONS'));
const CONSUMER = JSON.parse(process.env.CHAOS_CONSUMER ?? '{}') as ConsumerOptions;
const CRASH_RATE = Number(process.env.CHAOS_CRASH_RATE ?? '0');
/** How long a double-sends idempotency record lives: longer than any test. */
const SEEN_TTL_MS = 600_000;
const STATS_EVERY_MS = 200;

/**
 * The handlers' own connection. One retry per command, so a handler fails fast
 * while Redis is down and the library retries it (in place, or parked behind its
 * key with the default ordering).
 */
@Injectable()
class Records implements OnModuleDestroy {
  readonly redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });

  constructor() {
    this.redis.on('error', () => undefined); // a failed command surfaces in the handler
    // State update and idempotency record in one atomic step: the total moves
    // only when the event id was not seen by this group before.
    this.redis.defineCommand('chaosApply', {
      numberOfKeys: 5,
      lua: `
        -- KEYS: seen, total, calls, hits, crashed pids; ARGV: amount, seen TTL (ms), pid when crashing after this or ''
        redis.call('INCR', KEYS[3])
        if ARGV[3] ~= '' then redis.call('SADD', KEYS[5], ARGV[3]) end
        if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[2]) then
          redis.call('INCRBY', KEYS[2], ARGV[1])
          return 1
        end
        redis.call('INCR', KEYS[4])
        return 0`,
    });
  }

  apply(group: string, eventId: string, amount: number, crashing: boolean): Promise<number> {
    const apply = (this.redis as unknown as { chaosApply: (...args: Array<string | number>) => Promise<number> }).chaosApply;
    return apply.call(
      this.redis,
      chaosKeys.seen(PREFIX, group, eventId),
      chaosKeys.total(PREFIX, group),
      chaosKeys.calls(PREFIX, group),
      chaosKeys.hits(PREFIX, group),
      chaosKeys.crashedPids(PREFIX),
      amount,
      SEEN_TTL_MS,
      crashing ? String(process.pid) : '',
    );
  }

  onModuleDestroy(): void {
    this.redis.disconnect();
  }
}

/** Set once the app exists, so a handler about to crash can report its counters first. */
let consumers: EventrailConsumers | undefined;

/** Resolves once the message is written to the IPC pipe (never waits on a gone parent). */
function report(message: ChaosWorkerMessage): Promise<void> {
  if (!process.connected) return Promise.resolve();
  return new Promise((resolve) => process.send?.(message, undefined, {}, () => resolve()));
}

function reportStats(): Promise<void> {
  return consumers ? report({ type: 'stats', pid: process.pid, stats: consumers.stats() }) : Promise.resolve();
}

function jitter(): Promise<void> {
  const pick = Math.floor(Math.random() * 3);
  return new Promise((resolve) => (pick === 0 ? setImmediate(resolve) : setTimeout(resolve, pick)));
}

/** A real crash: no shutdown hook runs, no lease is released, nothing is committed. */
function crash(): never {
  process.kill(process.pid, 'SIGKILL');
  throw new Error('unreachable: SIGKILL did not end the process');
}

@Injectable()
class CrashLoopHandlers {
  constructor(private readonly records: Records) {}

  @OnEvent(EVENTS.normal, GROUPS.loop)
  async normal(message: EventrailMessage<{ seq: number }>): Promise<void> {
    await this.records.redis.rpush(chaosKeys.handledSeqs(PREFIX), `${message.data.seq}|${process.pid}`);
  }

  /** Kills its process; with `throwFirst`, its first attempts throw instead (so it is parked first, with ordering 'key'). */
  @OnEvent(EVENTS.poison, GROUPS.loop)
  async poison(message: EventrailMessage<{ seq: number; throwFirst?: number }>): Promise<void> {
    if (message.attempt <= (message.data.throwFirst ?? 0)) throw new Error(`poison attempt ${message.attempt} throws`);
    await this.records.redis.incr(chaosKeys.poisonRuns(PREFIX));
    crash();
  }
}

@Injectable()
class KillRestartHandlers {
  constructor(private readonly records: Records) {}

  /**
   * Takes 0 to 2 ms, at random, so handlers that were wrongly let run side by
   * side would record out of order. Throws while Redis is down: the library
   * retries it, and the key (with 'partition' ordering, the partition) waits.
   */
  @OnEvent(EVENTS.tick, GROUPS.workers)
  async tick(message: EventrailMessage<{ seq: number }>): Promise<void> {
    await jitter();
    const { partition, offset, key, data } = message;
    const record = encodeHandling({ partition, offset, key: key ?? '', seq: data.seq, pid: process.pid });
    await this.records.redis.rpush(chaosKeys.handlings(PREFIX), record);
  }
}

@Injectable()
class DoubleSendHandlers {
  constructor(private readonly records: Records) {}

  @OnEvent(EVENTS.payment, { group: GROUPS.ledger, enableIdempotency: true })
  async ledger(message: EventrailMessage<{ amount: number }>): Promise<void> {
    await this.apply(message, message.data.amount);
  }

  @OnEvent(EVENTS.payment, { group: GROUPS.counter, enableIdempotency: true })
  async counter(message: EventrailMessage<{ amount: number }>): Promise<void> {
    await this.apply(message, 1);
  }

  /** The side effect lands, then (at CRASH_RATE) the process dies before the library can commit it. */
  private async apply(message: EventrailMessage, amount: number): Promise<void> {
    const crashing = Math.random() < CRASH_RATE;
    await this.records.apply(message.group, message.id, amount, crashing);
    if (crashing) {
      await reportStats();
      crash();
    }
  }
}

const PROVIDERS: Record<ChaosMode, () => Type[]> = {
  'crash-loop': () => [Records, CrashLoopHandlers],
  'kill-restart': () => [Records, KillRestartHandlers],
  'double-sends': () => [Records, DoubleSendHandlers],
  fuzz: () => fuzzProviders(Number(process.env.CHAOS_FUZZ_GROUPS ?? '1'), process.env.CHAOS_FUZZ_OLDER === '1'),
};

@Module({
  imports: [EventrailModule.forRoot({ partitions: PARTITIONS, consumer: CONSUMER })],
  providers: PROVIDERS[MODE](),
})
class ChaosWorkerModule {}

async function main(): Promise<void> {
  const app = await NestFactory.createApplicationContext(ChaosWorkerModule, { logger: ['log', 'warn', 'error'] });
  const running = app.get(EventrailConsumers);
  consumers = running;
  process.on('message', (command: ChaosWorkerCommand) => {
    if (command.cmd === 'stats') void reportStats();
  });
  // The test runner is gone: do not linger as an orphan.
  process.on('disconnect', () => process.exit(1));
  setInterval(() => void reportStats(), STATS_EVERY_MS).unref();
  await report({ type: 'ready', pid: process.pid, workerId: running.workerId });
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`chaos-worker: ${name} is not set`);
  return value;
}

main().catch((error: unknown) => {
  console.error('chaos-worker failed to start:', error);
  process.exit(1);
});
