import { Inject, Injectable, Logger, OnModuleDestroy } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { EVENTRAIL_OPTIONS } from '../eventrail.constants';
import { resolveConsumerOptions, ResolvedConsumerOptions, ResolvedEventrailOptions } from '../eventrail.options';
import { EventrailRedis } from '../redis/eventrail-redis';
import { GroupConsumer, WorkerIdentity } from './group-consumer';
import type { HandlerMap } from './handler-binding';
import { DeadLetterSink } from './dead-letter.sink';
import type { GroupStats } from './group-stats';
import { RebalanceSignal } from './rebalance-signal';
import { MetricsHooks } from '../metrics/eventrail-metrics';

/**
 * The consumer groups of this process. Started on bootstrap unless
 * `autoStart: false`; stopped on Nest's shutdown, before the Redis connection
 * closes, so running handlers finish and partitions are handed over at once.
 */
@Injectable()
export class EventrailConsumers implements OnModuleDestroy {
  private readonly logger = new Logger(EventrailConsumers.name);
  private readonly groups = new Map<string, GroupConsumer>();
  private readonly signal: RebalanceSignal;
  private readonly identity: WorkerIdentity;
  private readonly metrics: MetricsHooks;
  private starting?: Promise<void>;
  private started = false;

  constructor(
    private readonly redis: EventrailRedis,
    @Inject(EVENTRAIL_OPTIONS) private readonly options: ResolvedEventrailOptions,
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

  /** Adds a group found by the explorer. Its options are resolved here, with the module's and `groups.<name>` as the base. */
  register(group: string, handlers: HandlerMap, declared: ReadonlyArray<{ path: string; options: object }>): void {
    let options: ResolvedConsumerOptions = resolveConsumerOptions(`groups.${group}`, this.options.groups[group], this.options.consumer);
    for (const { path, options: decoratorOptions } of declared) {
      options = resolveConsumerOptions(path, decoratorOptions, options);
    }
    const sink = new DeadLetterSink(this.redis, this.identity.id, this.metrics);
    const announce = (name: string): Promise<void> => this.signal.announce(name);
    this.groups.set(group, new GroupConsumer(group, handlers, options, this.redis, this.identity, sink, announce, this.metrics));
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

  get isRunning(): boolean {
    return this.started;
  }

  /** Joins every group and takes its fair share of partitions. Resolves once they are running. */
  start(): Promise<void> {
    this.starting ??= (async () => {
      await this.redis.whenPrepared();
      if (this.groups.size === 0) return;
      await this.signal.listen((group) => this.groups.get(group)?.requestRebalance());
      await Promise.all([...this.groups.values()].map((g) => g.start()));
      this.started = true;
      this.logger.log(`Consuming as ${this.identity.id}: ${this.describe()}`);
    })().catch((error: unknown) => {
      this.starting = undefined;
      throw error;
    });
    return this.starting;
  }

  /** Stops every group: running handlers finish (within `shutdownTimeoutMs`), offsets are committed, leases released. */
  async stop(): Promise<void> {
    const starting = this.starting;
    this.starting = undefined;
    // A start still waiting for Redis (degraded mode) is simply abandoned.
    if (this.redis.isReady()) await starting?.catch(() => undefined);
    await Promise.all([...this.groups.values()].map((g) => g.stop()));
    this.signal.close();
    this.started = false;
  }

  async onModuleDestroy(): Promise<void> {
    await this.stop();
  }

  private describe(): string {
    return [...this.groups.values()].map((g) => `${g.name} [${g.ownedPartitions().join(',')}]`).join(', ');
  }
}
