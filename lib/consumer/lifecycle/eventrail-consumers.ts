import { Inject, Injectable, Logger, OnApplicationBootstrap, OnModuleDestroy } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { EVENTRAIL_OPTIONS } from '../../config/eventrail.constants';
import type { ConsumersView } from '../consumer.options';
import { EventrailRedis } from '../../redis/eventrail-redis';
import { describeError } from '../../util/describe-error';
import { GroupConsumer } from './group-consumer';
import type { GroupPlan } from '../handling/group-plan';
import { DeadLetterSink } from '../handling/dead-letter.sink';
import type { GroupStats } from '../pipeline/group-stats';
import type { WorkerIdentity } from '../coordination/membership';
import { RebalanceSignal } from '../coordination/rebalance-signal';
import { MetricsHooks } from '../../metrics/eventrail-metrics';
import { traceDeadLetters, traceHandlers, type ProcessTracingConfig } from '../../tracing/process-tracing';
import { checkInteger, checkObject, rejectUnknownKeys } from '../../config/option-checks';
import { waitUntilSettled } from './settle-watch';
import { StopDeadline } from '../pipeline/stop-deadline';

/** Options of `EventrailConsumers.settled()`. */
export interface SettleOptions {
  /** How long to wait before rejecting with `SettleTimeoutError`. @default 10000 */
  timeoutMs?: number;
}

export const DEFAULT_SETTLE_TIMEOUT_MS = 10_000;

/**
 * The consumer groups of this process, as the explorer planned them. Started
 * on bootstrap unless `autoStart: false` (in the background with
 * `allowDegradedStart`, so the app starts while Redis is away); stopped on
 * Nest's shutdown, before the Redis connection closes, so running handlers
 * finish and partitions are handed over at once.
 */
@Injectable()
export class EventrailConsumers implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger(EventrailConsumers.name);
  private readonly groups = new Map<string, GroupConsumer>();
  private readonly signal: RebalanceSignal;
  private readonly identity: WorkerIdentity;
  private readonly metrics: MetricsHooks;
  private starting?: Promise<void>;
  /** Moves on at every stop, so a start still trying its steps gives up. */
  private generation = 0;
  private started = false;
  private waiters: Array<{ resolve: () => void; reject: (error: unknown) => void }> = [];

  constructor(
    private readonly redis: EventrailRedis,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: ConsumersView & ProcessTracingConfig,
  ) {
    this.signal = new RebalanceSignal(redis);
    this.metrics = new MetricsHooks(options.metrics);
    const host = hostname();
    this.identity = { id: `${host}:${process.pid}:${randomBytes(4).toString('hex')}`, host, pid: process.pid, startedAt: Date.now() };
  }

  /** Worker id of this process in every group (`host:pid:random`). */
  get workerId(): string {
    return this.identity.id;
  }

  /** Adds a group the explorer found, with its options already resolved. */
  register({ group, handlers, options }: GroupPlan): void {
    // OpenTelemetry (when installed): a span per handler attempt and per dead letter.
    const sink = traceDeadLetters(this.options, new DeadLetterSink(this.redis, this.identity.id, this.metrics));
    const traced = traceHandlers(this.options, group, handlers);
    const announce = (name: string): Promise<void> => this.signal.announce(name);
    this.groups.set(group, new GroupConsumer(group, traced, options, this.redis, this.identity, sink, announce, this.metrics));
  }

  groupNames(): string[] {
    return [...this.groups.keys()];
  }

  /** Partitions each group works in this process right now. */
  ownership(): Record<string, number[]> {
    return Object.fromEntries([...this.groups].map(([name, group]) => [name, group.ownedPartitions()]));
  }

  /** Counters per group since this process joined it: handled, dead-lettered, skipped as duplicates. */
  stats(): Record<string, GroupStats> {
    return Object.fromEntries([...this.groups].map(([name, group]) => [name, { ...group.stats }]));
  }

  /** True while groups of this process are consuming (false when it has none). */
  get isRunning(): boolean {
    return this.started && this.groups.size > 0;
  }

  /**
   * Resolves once the consumers run: every group joined and took its first
   * share of partitions (at once if they already run). With `autoStart`, that
   * is shortly after bootstrap, or once Redis answers after a degraded start;
   * with `autoStart: false`, after `start()`. Rejects if that start fails.
   * Await it in tests instead of waiting for a partition to be taken.
   */
  whenRunning(): Promise<void> {
    if (this.started) return Promise.resolve();
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /**
   * Resolves once every group running in this process has handled (or
   * dead-lettered) everything appended to the log before the call: each
   * partition's last entry is noted now, and the wait ends when every group's
   * committed offset reaches it in every partition, wherever that partition is
   * worked, and no message is parked there any more (`ordering: 'key'` or
   * `'unordered'`: a parked message is behind the offset but not done; see
   * `waitUntilSettled`). Waits for `whenRunning()` first. Rejects
   * with `SettleTimeoutError`, naming the groups and partitions still behind,
   * after `timeoutMs` (default 10000). Resolves at once when this process has
   * no groups. Meant for tests: publish, `await settled()`, assert.
   */
  async settled(options: SettleOptions = {}): Promise<void> {
    checkObject('settled options', options, 'an object like { timeoutMs: 5000 }');
    rejectUnknownKeys('settled', options, ['timeoutMs']);
    const timeoutMs = checkInteger('settled.timeoutMs', options.timeoutMs ?? DEFAULT_SETTLE_TIMEOUT_MS, 1, 2 ** 31 - 1);
    if (this.groups.size === 0) return;
    await waitUntilSettled(this.redis, [...this.groups.values()], this.whenRunning(), timeoutMs);
  }

  async onApplicationBootstrap(): Promise<void> {
    if (!this.options.autoStart || this.groups.size === 0) return;
    if (this.options.allowDegradedStart) {
      void this.start().catch((error: unknown) => this.logger.error(`Consumers could not start: ${describeError(error)}`));
      return;
    }
    await this.start();
  }

  /** Joins every group and takes its fair share of partitions. Resolves once they are running. */
  start(): Promise<void> {
    this.starting ??= (async () => {
      await this.redis.whenPrepared();
      if (this.groups.size > 0) {
        // Redis may go away between the log's check and these (a restart): each is tried again for a while.
        const generation = this.generation;
        const wanted = (): boolean => generation === this.generation;
        try {
          await this.redis.retryAtStartup(() => this.signal.listen((group) => this.groups.get(group)?.requestRebalance()), wanted);
          if (wanted()) await Promise.all([...this.groups.values()].map((g) => this.redis.retryAtStartup(() => g.start(), wanted)));
        } catch (error) {
          if (wanted()) throw error;
        }
        // Stopped meanwhile by a stop that did not wait for Redis: each group undid its own start, and the
        // subscription goes too (unless a newer start runs, which shares it).
        if (!wanted()) {
          if (this.starting === undefined) this.signal.close();
          return;
        }
        this.logger.log(`Consuming as ${this.identity.id}: ${this.describe()}`);
      }
      this.started = true;
      this.settleWaiters((waiter) => waiter.resolve());
    })().catch((error: unknown) => {
      this.starting = undefined;
      this.settleWaiters((waiter) => waiter.reject(error));
      throw error;
    });
    return this.starting;
  }

  /**
   * Stops every group: running handlers finish (within `shutdownTimeoutMs`), offsets are committed, leases
   * released. Bounded whatever Redis does: resolves within the largest `shutdownTimeoutMs` of the groups plus
   * `SHUTDOWN_REDIS_WAIT_MS` (see there); what Redis has not answered by then is left to expire.
   */
  async stop(): Promise<void> {
    const starting = this.starting;
    this.starting = undefined;
    this.generation++;
    const groups = [...this.groups.values()];
    const deadline = StopDeadline.forShutdown(Math.max(0, ...groups.map((g) => g.options.shutdownTimeoutMs)));
    // A start still waiting for Redis (degraded mode) is simply abandoned. One under way is waited for alongside the
    // groups' stops (a group stopped in the middle of its start undoes that start when it ends), within the deadline.
    const started = this.redis.isReady() ? deadline.within(starting?.catch(() => undefined)) : undefined;
    await Promise.all([started, ...groups.map((g) => g.stop(deadline))]);
    this.signal.close();
    this.started = false;
  }

  async onModuleDestroy(): Promise<void> {
    await this.stop();
  }

  private settleWaiters(settle: (waiter: { resolve: () => void; reject: (error: unknown) => void }) => void): void {
    const waiters = this.waiters;
    this.waiters = [];
    waiters.forEach(settle);
  }

  private describe(): string {
    return [...this.groups.values()].map((g) => `${g.name} [${g.ownedPartitions().join(',')}]`).join(', ');
  }
}
