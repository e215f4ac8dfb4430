import { Logger } from '@nestjs/common';
import type { InitialOffset, ResolvedConsumerOptions } from '../eventrail.options';
import { offsetBeforeTime, previousStreamId } from '../log/stream-id';
import type { EventrailRedis } from '../redis/eventrail-redis';
import { countEntriesAfter } from '../log/lag';
import type { MetricsHooks } from '../metrics/eventrail-metrics';
import { newGroupStats } from './group-stats';
import type { FailedMessageSink } from './failed-message';
import type { HandlerMap } from './handler-binding';
import { MessageProcessor } from './message-processor';
import { PartitionWorker } from './partition-worker';
import { Semaphore } from './semaphore';

export interface WorkerIdentity {
  /** `host:pid:random`. */
  id: string;
  host: string;
  pid: number;
  startedAt: number;
}

/**
 * Runs one consumer group in this process: heartbeats its membership, keeps
 * its fair share of partitions (`ceil(partitions / liveMembers)`) by taking
 * free or expired leases and handing back extras, renews the leases it holds,
 * and runs a `PartitionWorker` per owned partition.
 */
export class GroupConsumer {
  private readonly logger = new Logger(GroupConsumer.name);
  private readonly workers = new Map<number, PartitionWorker>();
  private readonly processor: MessageProcessor;
  private readonly semaphore: Semaphore;
  /** Counters since this process joined the group. */
  readonly stats = newGroupStats();
  private members: string[] = [];
  private timer?: NodeJS.Timeout;
  private running = false;
  private rebalancing?: Promise<void>;
  private rebalanceAgain = false;
  private tickFailing = false;
  private ticking?: Promise<void>;
  private tickAgain = false;
  private readonly info: string;

  constructor(
    readonly name: string,
    private readonly handlers: HandlerMap,
    readonly options: ResolvedConsumerOptions,
    private readonly redis: EventrailRedis,
    private readonly worker: WorkerIdentity,
    sink: FailedMessageSink,
    /** Tells the other workers of the group to rebalance now. */
    private readonly announce: (group: string) => Promise<void>,
    private readonly metrics: MetricsHooks,
  ) {
    this.semaphore = new Semaphore(options.concurrency);
    // Member info for the admin API; with the TTL, the heartbeat expiry gives the last heartbeat.
    const { host, pid, startedAt } = worker;
    this.info = JSON.stringify({ host, pid, startedAt, heartbeatTtlMs: options.heartbeatTtlMs });
    this.processor = new MessageProcessor(name, handlers, options, sink, this.semaphore, metrics);
  }

  /** Partitions this process works right now. */
  ownedPartitions(): number[] {
    return [...this.workers.values()]
      .filter((w) => w.active)
      .map((w) => w.partition)
      .sort((a, b) => a - b);
  }

  async start(): Promise<void> {
    const { keys, client } = this.redis;
    // Heartbeat first: a group listed without a last-seen time could look stale to retention and pruning.
    this.members = await this.heartbeat();
    await Promise.all([client.sadd(keys.groups, this.name), client.sadd(keys.events(this.name), ...this.handlers.keys())]);
    this.running = true;
    await this.announce(this.name);
    await this.rebalance();
    const interval = Math.max(100, Math.floor(Math.min(this.options.lockTtlMs, this.options.heartbeatTtlMs) / 3));
    this.timer = setInterval(() => void this.tick(), interval);
    this.timer.unref();
  }

  /**
   * Another worker joined or left, or an admin moved the offsets: heartbeat,
   * check the leases and rebalance now rather than at the next tick.
   */
  requestRebalance(): void {
    void this.tick();
  }

  /** Hands every partition back (finishing running handlers within `shutdownTimeoutMs`) and leaves the group. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    clearInterval(this.timer);
    await this.rebalancing?.catch(() => undefined);
    await Promise.all([...this.workers.values()].map((w) => w.stopGracefully(this.options.shutdownTimeoutMs)));
    const { keys, client } = this.redis;
    if (!this.redis.isReady()) return; // membership expires on its own
    try {
      // Last seen on the Redis clock, like the heartbeats, so stale-group checks compare like with like.
      const [seconds, micros] = await client.time();
      await client
        .pipeline()
        .zrem(keys.members(this.name), this.worker.id)
        .hdel(keys.memberInfo(this.name), this.worker.id)
        .set(keys.seen(this.name), Number(seconds) * 1000 + Math.floor(Number(micros) / 1000))
        .exec();
      await this.announce(this.name);
    } catch (error) {
      this.logger.warn(`Group "${this.name}": could not leave cleanly (${(error as Error).message}); membership expires on its own`);
    }
  }

  /**
   * One tick at a time: while Redis is down a tick waits, and the timer's
   * next ones would otherwise pile up behind it. A tick asked for meanwhile
   * runs once more afterwards.
   */
  private tick(): Promise<void> {
    if (this.ticking) {
      this.tickAgain = true;
      return this.ticking;
    }
    this.ticking = (async () => {
      try {
        do {
          this.tickAgain = false;
          await this.tickOnce();
        } while (this.tickAgain && this.running);
      } finally {
        this.ticking = undefined;
      }
    })();
    return this.ticking;
  }

  /**
   * Heartbeat and lease renewals, sent together (one round trip; separate
   * commands because on a cluster they live in different slots), then a
   * rebalance if the membership changed.
   */
  private async tickOnce(): Promise<void> {
    if (!this.running) return;
    const { keys, client } = this.redis;
    const owned = [...this.workers.values()].filter((w) => w.active);
    try {
      const renewals = owned.map((w) =>
        client.eventrailRenewLease(keys.lease(this.name, w.partition), w.token, this.options.lockTtlMs).catch(() => -1),
      );
      const [members, ...renewed] = await Promise.all([this.heartbeat(), ...renewals]);
      owned.forEach((w, i) => {
        // -1: the renewal failed to reach Redis; the lease may still hold, try again next tick.
        if (renewed[i] === 0) {
          this.logger.warn(`Group "${this.name}" partition ${w.partition}: lease lost (expired or taken over); stopping it`);
          w.abort();
        }
      });
      if (this.tickFailing) this.logger.log(`Group "${this.name}": Redis answers again`);
      this.tickFailing = false;
      this.members = members;
      await this.rebalance();
      if (this.metrics.wantsLag) await this.sampleLag();
    } catch (error) {
      if (!this.tickFailing) this.logger.warn(`Group "${this.name}": heartbeat failed (${(error as Error).message}); retrying`);
      this.tickFailing = true;
    }
  }

  /** Reports the lag of the partitions this process works (see `countEntriesAfter` for when it is exact). */
  private async sampleLag(): Promise<void> {
    const owned = [...this.workers.values()].filter((w) => w.active);
    const lags = await Promise.all(owned.map((w) => countEntriesAfter(this.redis, w.partition, w.committedOffset)));
    // Only partitions still worked here: a sample of one released or lost meanwhile would bring back its removed series.
    owned.forEach((w, i) => {
      if (this.workers.get(w.partition) === w && w.active) this.metrics.emit('onLag', this.name, w.partition, lags[i].lag);
    });
  }

  /** One rebalance at a time; a request during one runs once more afterwards. */
  private rebalance(): Promise<void> {
    if (this.rebalancing) {
      this.rebalanceAgain = true;
      return this.rebalancing;
    }
    this.rebalancing = (async () => {
      try {
        do {
          this.rebalanceAgain = false;
          await this.balanceOnce();
        } while (this.rebalanceAgain && this.running);
      } finally {
        this.rebalancing = undefined;
      }
    })();
    return this.rebalancing;
  }

  private async balanceOnce(): Promise<void> {
    if (!this.running) return;
    const partitions = this.redis.keys.partitions;
    const live = Math.max(1, this.members.length);
    const share = Math.ceil(partitions / live);
    const order = this.preferenceOrder();
    const owned = order.filter((p) => this.workers.get(p)?.active);

    if (owned.length > share) {
      // Hand back the partitions furthest from this worker's preferred range.
      const extras = owned.slice(share);
      this.logger.log(`Group "${this.name}": handing back partitions ${extras.join(', ')} (fair share is ${share} of ${partitions})`);
      await Promise.all(extras.map((p) => this.workers.get(p)?.stopGracefully(this.options.shutdownTimeoutMs, true)));
      await this.announce(this.name);
      return;
    }
    let missing = share - owned.length;
    // A partition whose old worker is still finishing is not free yet.
    const candidates = order.filter((p) => !this.workers.has(p));
    while (missing > 0 && candidates.length > 0 && this.running) {
      const attempt = candidates.splice(0, missing);
      const acquired = await this.acquire(attempt);
      missing -= acquired;
    }
  }

  /** Tries the leases of `partitions` in one round trip; starts a worker for each one taken. */
  private async acquire(partitions: number[]): Promise<number> {
    const { keys, client } = this.redis;
    const [mode, initialId] = initialOffsetArgs(this.options.initialOffset);
    const replies = await Promise.all(
      partitions.map((p) =>
        client
          .eventrailAcquireLease(
            keys.lease(this.name, p),
            keys.epoch(this.name, p),
            keys.offset(this.name, p),
            keys.stream(p),
            keys.recovery(this.name, p),
            this.worker.id,
            this.options.lockTtlMs,
            mode,
            initialId,
          )
          .catch(() => null),
      ),
    );
    let acquired = 0;
    partitions.forEach((partition, i) => {
      const reply = replies[i];
      if (!reply) return;
      const [token, committed, recovering] = reply;
      if (!this.running) {
        // Stopped while the acquire was in flight: give the lease straight back.
        const epoch = token.slice(token.lastIndexOf(':') + 1);
        void client
          .eventrailReleaseLease(keys.lease(this.name, partition), keys.recovery(this.name, partition), token, epoch)
          .catch(() => undefined);
        return;
      }
      const worker = new PartitionWorker({
        group: this.name,
        partition,
        token,
        committed,
        recovering: recovering === 1,
        stats: this.stats,
        metrics: this.metrics,
        redis: this.redis,
        processor: this.processor,
        semaphore: this.semaphore,
        options: this.options,
      });
      this.workers.set(partition, worker);
      worker.start((ended) => this.onWorkerEnd(ended));
      this.metrics.emit('onLeaseAcquired', this.name, partition);
      acquired++;
      const how = recovering === 1 ? ' from a worker that did not release it (recovering one entry at a time)' : '';
      this.logger.log(`Group "${this.name}": took partition ${partition} at offset ${committed}${how}`);
    });
    return acquired;
  }

  private onWorkerEnd(worker: PartitionWorker): void {
    // Wait for its stop to finish (commit, release) before the slot counts as free.
    void worker.stopGracefully(this.options.shutdownTimeoutMs).finally(() => {
      if (this.workers.get(worker.partition) === worker) this.workers.delete(worker.partition);
      if (!worker.wasLost) {
        this.metrics.emit('onLeaseReleased', this.name, worker.partition);
        return;
      }
      this.metrics.emit('onLeaseLost', this.name, worker.partition);
      if (this.running) void this.rebalance().catch(() => undefined);
    });
  }

  /**
   * Partitions in the order this worker prefers them: a rotation that starts
   * at its slice of the partition range, so live members aim at different
   * partitions and rarely race for the same lease.
   */
  private preferenceOrder(): number[] {
    const partitions = this.redis.keys.partitions;
    const index = Math.max(0, this.members.indexOf(this.worker.id));
    const start = Math.floor((index * partitions) / Math.max(1, this.members.length));
    return Array.from({ length: partitions }, (_, i) => (start + i) % partitions);
  }

  private heartbeat(): Promise<string[]> {
    return this.redis.client.eventrailHeartbeat(...this.heartbeatArgs());
  }

  private heartbeatArgs(): [string, string, string, string, number, string] {
    const { keys } = this.redis;
    const { name } = this;
    return [keys.members(name), keys.memberInfo(name), keys.seen(name), this.worker.id, this.options.heartbeatTtlMs, this.info];
  }
}

function initialOffsetArgs(offset: InitialOffset): ['start' | 'end' | 'id', string] {
  switch (offset.mode) {
    case 'fromStart':
      return ['start', ''];
    case 'fromEnd':
      return ['end', ''];
    case 'fromId':
      return ['id', previousStreamId(offset.id)];
    case 'fromTime':
      return ['id', offsetBeforeTime(offset.time)];
  }
}
