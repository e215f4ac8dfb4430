import { Logger } from '@nestjs/common';
import type { ResolvedConsumerOptions } from '../consumer.options';
import type { EventrailRedis } from '../../redis/eventrail-redis';
import { readLag } from '../coordination/lag';
import type { MetricsHooks } from '../../metrics/eventrail-metrics';
import { describeError } from '../../util/describe-error';
import { logRecord } from '../../util/log-record';
import type { Cluster, Redis } from 'ioredis';
import { newGroupStats, type GroupStats } from '../pipeline/group-stats';
import type { FailedMessageSink } from '../handling/failed-message';
import type { HandlerMap } from '../handling/group-plan';
import { AcquiredLease, followsOwnLease, PartitionLease } from '../coordination/lease';
import { MemberBars } from '../coordination/member-bars';
import { GroupMembership, WorkerIdentity } from '../coordination/membership';
import { FailureMemory } from '../coordination/failure-memory';
import { explainRefusal, openReadConnection } from '../coordination/read-connection';
import { claimGroup, releaseGroup } from '../coordination/group-claims';
import { MessageProcessor } from '../handling/message-processor';
import { ParkedLines } from '../handling/parked-lines';
import type { Parking } from '../handling/delivery';
import { PartitionWorker, type PartitionWorkerParams } from '../pipeline/partition-worker';
import { SHUTDOWN_REDIS_WAIT_MS, StopDeadline } from '../pipeline/stop-deadline';
import { Semaphore } from '../../util/semaphore';
import { SerialTask } from '../../util/serial-task';

/** The least time a partition's read connection may be down, while the rest answers, before the partition is handed back. */
const READ_RECONNECT_GRACE_MS = 5_000;

/** Take-backs of its own lapsed lease in a row at one offset before each warning that names it. */
const STALLS_BEFORE_WARNING = 3;

/**
 * Runs one consumer group in this process: keeps its fair share of
 * partitions (`ceil(partitions / liveMembers)`) by taking free or expired
 * leases and handing back extras, and runs a `PartitionWorker` per owned
 * partition. Membership (`GroupMembership`) and leases (`PartitionLease`)
 * know how they are kept in Redis; this class decides when.
 */
export class GroupConsumer {
  private readonly logger = new Logger(GroupConsumer.name);
  private readonly workers = new Map<number, PartitionWorker>();
  private readonly processor: MessageProcessor;
  /** Tries a parked head once. */
  private readonly retryProcessor: MessageProcessor;
  /**
   * With `'partition'` ordering: the processor of a partition where members with `'key'` or
   * `'unordered'` left parked messages (a rolling deploy that changes `ordering`); see `Parking.inherited`.
   */
  private readonly inheritedProcessor?: MessageProcessor;
  /** The parked lines of the partitions this process works, by partition. */
  private readonly parked = new Map<number, ParkedLines>();
  private readonly semaphore: Semaphore;
  private readonly membership: GroupMembership;
  private readonly bars: MemberBars;
  /** Counters since this process joined the group. */
  readonly stats: GroupStats;
  private members: string[] = [];
  private timer?: NodeJS.Timeout;
  /** The pace of ticks: a third of the shorter of the lease and heartbeat TTLs. */
  private tickMs = 0;
  private running = false;
  /** Counts `stop()` calls: a start that sees the count move was stopped on its way, and undoes itself. */
  private stops = 0;
  /** One rebalance at a time; one asked for meanwhile runs once more afterwards. */
  private readonly rebalancer = new SerialTask(
    () => this.balanceOnce(),
    () => this.running,
  );
  /**
   * While the workers stop (no ticks then): the heartbeat, so this member stays live until it leaves (a
   * member seen to lapse counts as crashed: its types are held, its leases taken back), and the renewals.
   * One round at a time.
   */
  private readonly stopTicker = new SerialTask(
    async () => {
      await Promise.all([this.membership.heartbeat(), this.renewLeases()]).catch(() => undefined);
    },
    () => !this.running,
  );
  /** One tick at a time: while Redis is down a tick waits, and the timer's next ones would otherwise pile up behind it. */
  private readonly ticker = new SerialTask(
    () => this.tickOnce(),
    () => this.running,
  );
  private tickFailing = false;
  /** The wanted types this worker lacked when it last said so ('' for none). */
  private lacking = '';
  /** The gaps last reported by `reportStalled` ('' while some member is able). */
  private stalled = '';
  private readonly commitListeners = new Set<(partition: number, offset: string) => void>();
  /**
   * The last lease this process held per partition, where it took it, and how many times in a row it
   * took it back after its own lapsed at that same offset: a lease taken right after its own is no crash.
   */
  private readonly lastHeld = new Map<number, { token: string; committed: string; stalls: number }>();
  /**
   * Partitions whose lease this process gave back because it could not open their read connection
   * (Redis at `maxclients`): why, and when (performance.now()) it tries them again.
   */
  private readonly unread = new Map<number, { cause: string; retryAt: number }>();
  /** The unread partitions and cause last warned about ('' for none). */
  private unreadReported = '';
  /** Since when (performance.now()) a worker's read connection has been down while this process's ticks got through. */
  private readonly notReading = new Map<PartitionWorker, number>();

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
    this.stats = newGroupStats(options.ordering !== 'partition');
    this.membership = new GroupMembership(redis, name, worker, options.heartbeatTtlMs);
    // Renewed every tick (a third of the shorter TTL): two lease TTLs outlast any tick.
    this.bars = new MemberBars(redis, name, worker.id, 2 * options.lockTtlMs);
    // Where messages are parked they are retried by their tiers, never in place (see `Delivery.inPlace`).
    const parking: Parking = { linesOf: (partition) => this.parked.get(partition) };
    const parked = (): MessageProcessor =>
      new MessageProcessor(name, handlers, { ...options, maxRetryAgeMs: 0 }, sink, this.semaphore, metrics, undefined, parking);
    if (options.ordering === 'partition') {
      this.processor = new MessageProcessor(name, handlers, options, sink, this.semaphore, metrics, new FailureMemory(redis, name));
      this.inheritedProcessor = parked();
    } else {
      this.processor = parked();
    }
    this.retryProcessor = parked();
  }

  /** Partitions this process works right now. */
  ownedPartitions(): number[] {
    return this.activeWorkers()
      .map((w) => w.partition)
      .sort((a, b) => a - b);
  }

  /**
   * The committed offset of `partition` as this process's worker of it knows
   * it, or undefined when no active worker here owns it (then Redis knows).
   */
  localCommitted(partition: number): string | undefined {
    const worker = this.workers.get(partition);
    return worker?.active ? worker.committedOffset : undefined;
  }

  /** The parked lines of `partition` as this process's worker of it holds them; undefined where it parks nothing. */
  localParked(partition: number): ParkedLines | undefined {
    return this.parked.get(partition);
  }

  /** Calls `listener` after every commit a worker of this group makes here; returns the unsubscribe. */
  onCommit(listener: (partition: number, offset: string) => void): () => void {
    this.commitListeners.add(listener);
    return () => this.commitListeners.delete(listener);
  }

  async start(): Promise<void> {
    const stops = this.stops;
    claimGroup(this.redis.keys.prefix, this.name, this, this.label(), this.handlers.keys());
    // Asked before join() registers the group: a new group's offsets are set when its partitions are first taken.
    const backlog = await this.newGroupBacklog();
    this.members = await this.membership.join(this.handlers.keys());
    if (backlog > 0) {
      const msg = `Group "${this.name}" is new and starts at the beginning: ${backlog} entries to handle (initialOffset { mode: 'fromEnd' } starts after them)`;
      this.logger.log(logRecord(msg, { group: this.name, entries: backlog }));
    }
    this.running = true;
    await this.announce(this.name);
    await this.rebalancer.run();
    this.tickMs = Math.max(100, Math.floor(Math.min(this.options.lockTtlMs, this.options.heartbeatTtlMs) / 3));
    this.timer = setInterval(() => void this.ticker.run(), this.tickMs);
    this.timer.unref();
    // A stop came while this start waited for Redis and found little or nothing running: what this start took goes back now.
    if (this.stops !== stops) await this.stop();
  }

  /** The handlers of this consumer, for errors that name it: `Class.method, @EventPattern('x')`. */
  private label(): string {
    const names = [...this.handlers.values()].flatMap((bindings) => bindings.map((b) => b.name));
    return [...new Set(names)].join(', ');
  }

  /**
   * Another worker joined or left, or an admin moved the offsets: heartbeat,
   * check the leases and rebalance now rather than at the next tick.
   */
  requestRebalance(): void {
    void this.ticker.run();
    // The signal also carries operators' commands to parked lines (EventrailAdmin.retryParked, giveUpParked).
    for (const worker of this.activeWorkers()) {
      worker.applyParkedCommands().catch((error: unknown) => {
        this.logger.warn(
          logRecord(`Group "${this.name}" partition ${worker.partition}: could not read parked-line commands: ${describeError(error)}`, {
            group: this.name,
            partition: worker.partition,
          }),
        );
      });
    }
  }

  /**
   * Hands every partition back (finishing running handlers within `shutdownTimeoutMs`) and leaves the
   * group, all by `deadline` (by default `shutdownTimeoutMs` plus `SHUTDOWN_REDIS_WAIT_MS` from now):
   * what Redis has not answered by then is left behind, and expires on its own.
   */
  async stop(deadline = StopDeadline.forShutdown(this.options.shutdownTimeoutMs)): Promise<void> {
    this.stops++;
    // Given back even when the start failed on its way: the claim was taken first.
    releaseGroup(this.redis.keys.prefix, this.name, this);
    if (!this.running) return;
    this.running = false;
    clearInterval(this.timer);
    // The heartbeat and the leases go on while the handlers finish (up to shutdownTimeoutMs, which may be longer
    // than lockTtlMs): a lease that lapsed would let another member start the same events meanwhile.
    const renewals = this.tickMs > 0 ? setInterval(() => void this.stopTicker.run(), this.tickMs) : undefined;
    renewals?.unref();
    // The rebalance in progress is waited for alongside the workers, not before them: it may be waiting on Redis
    // (an acquire, an announce), and the handlers' time starts now. A lease it acquires from here on goes straight back.
    const handedBack = await deadline.within(
      Promise.all([
        this.rebalancer.current?.catch(() => undefined),
        ...[...this.workers.values()].map((w) => w.stopGracefully(this.options.shutdownTimeoutMs)),
      ]),
    );
    clearInterval(renewals);
    // A heartbeat still on its way would put the member back after its leave.
    await deadline.within(this.stopTicker.current);
    if (!this.redis.isReady()) return; // membership expires on its own
    if (handedBack === 'late' || (await deadline.within(this.leave(deadline))) === 'late') {
      const msg = `Group "${this.name}": Redis did not answer within shutdownTimeoutMs + ${SHUTDOWN_REDIS_WAIT_MS} ms; leaving without a clean hand-over (leases and membership expire on their own)`;
      this.logger.warn(logRecord(msg, { group: this.name }));
    }
  }

  /** Leaves the group at once and tells the others, so they take the partitions now rather than at their next heartbeat. */
  private async leave(deadline: StopDeadline): Promise<void> {
    try {
      await this.bars.leave(this.membership.wants.able);
      await this.membership.leave();
      await this.announce(this.name);
    } catch (error) {
      // Failed after the deadline (the connection closed under it): the stop said so already.
      if (deadline.leftMs === 0) return;
      this.logger.warn(
        logRecord(`Group "${this.name}": could not leave cleanly (${describeError(error)}); membership expires on its own`, {
          group: this.name,
        }),
      );
    }
  }

  /**
   * Heartbeat and lease renewals, sent together (one round trip; separate
   * commands because on a cluster they live in different slots), then a
   * rebalance if the membership changed.
   */
  private async tickOnce(): Promise<void> {
    if (!this.running) return;
    const owned = this.activeWorkers();
    try {
      const [members] = await Promise.all([this.membership.heartbeat(), this.renewLeases()]);
      if (this.tickFailing) this.logger.log(logRecord(`Group "${this.name}": Redis answers again`, { group: this.name }));
      this.tickFailing = false;
      await this.handBackUnreadable(owned);
      this.members = members;
      await this.rebalancer.run();
      if (this.metrics.wantsLag) await this.sampleLag();
    } catch (error) {
      // A tick that a stop overtook (its heartbeat failed when the connection closed) has nothing to retry.
      if (!this.running) return;
      if (!this.tickFailing)
        this.logger.warn(logRecord(`Group "${this.name}": heartbeat failed (${describeError(error)}); retrying`, { group: this.name }));
      this.tickFailing = true;
    }
  }

  /**
   * Renews the lease of every worker that holds one: the active ones, and those finishing their handlers
   * after a hand-back or on shutdown. A worker whose lease is lost stops at once.
   */
  private async renewLeases(): Promise<void> {
    const holding = [...this.workers.values()].filter((w) => w.holdsLease);
    const renewed = await Promise.all(holding.map((w) => w.lease.renew()));
    holding.forEach((w, i) => {
      // 'unknown': the renewal did not reach Redis; the lease may still hold, try again next tick.
      // A worker that released its lease while the renewal travelled is not told it lost it.
      if (renewed[i] !== 'lost' || !w.holdsLease) return;
      const msg = `Group "${this.name}" partition ${w.partition}: lease lost (expired or taken over); stopping it`;
      this.logger.warn(logRecord(msg, { group: this.name, partition: w.partition }));
      w.abort();
    });
  }

  /** Reports the lag of the partitions this process works (see `readLag` for when it is exact). */
  private async sampleLag(): Promise<void> {
    const owned = this.activeWorkers();
    const { client, keys } = this.redis;
    const lags = await Promise.all(owned.map((w) => readLag(client, keys, this.name, w.partition)));
    // Only partitions still worked here: a sample of one released or lost meanwhile would bring back its removed series.
    owned.forEach((w, i) => {
      if (this.workers.get(w.partition) === w && w.active) this.metrics.emit('onLag', this.name, w.partition, lags[i].lag);
    });
  }

  /**
   * The entries a new group starting at the beginning of the log will handle, so that a group added to a
   * running system says it is about to handle the whole history; 0 for a known group, another
   * initialOffset, an empty log, or Redis not answering (join() then reports it).
   */
  private async newGroupBacklog(): Promise<number> {
    if (this.options.initialOffset.mode !== 'fromStart') return 0;
    const { keys, client } = this.redis;
    try {
      if ((await client.sismember(keys.groups, this.name)) === 1) return 0;
      const lengths = await Promise.all(keys.streams.map((stream) => client.xlen(stream)));
      return lengths.reduce((sum, length) => sum + length, 0);
    } catch {
      return 0;
    }
  }

  private async balanceOnce(): Promise<void> {
    if (!this.running) return;
    // Live members want events this worker cannot handle: it must not commit past them, so it works nothing.
    this.reportStalled();
    await this.barLacking();
    if (this.membership.wants.lacking.length > 0) return this.yieldAll(this.membership.wants.lacking);
    this.reportLacking([]);
    const partitions = this.redis.keys.partitions;
    const live = Math.max(1, this.members.length);
    const share = Math.ceil(partitions / live);
    const order = this.preferenceOrder();
    const owned = order.filter((p) => this.workers.get(p)?.active);

    if (owned.length > share) {
      // Hand back the partitions furthest from this worker's preferred range.
      const extras = owned.slice(share);
      this.logger.log(
        logRecord(`Group "${this.name}": handing back partitions ${extras.join(', ')} (fair share is ${share} of ${partitions})`, {
          group: this.name,
        }),
      );
      // Not waited for here: their handlers may take up to shutdownTimeoutMs, and the ticks (the heartbeat,
      // the renewals of every lease held, these included) go on meanwhile. The others are told once they are free.
      void Promise.all(extras.flatMap((p) => this.workers.get(p)?.stopGracefully(this.options.shutdownTimeoutMs, true) ?? [])).then(() =>
        this.announce(this.name),
      );
      return;
    }
    let missing = share - owned.length;
    // A partition whose old worker is still finishing is not free yet; one this process could not read
    // waits a lease TTL, so another member (with room for a connection) takes it first.
    const now = performance.now();
    const candidates = order.filter((p) => !this.workers.has(p) && (this.unread.get(p)?.retryAt ?? 0) <= now);
    while (missing > 0 && candidates.length > 0 && this.running) {
      const attempt = candidates.splice(0, missing);
      const acquired = await PartitionLease.acquire(
        this.redis,
        this.name,
        attempt,
        this.worker.id,
        this.options.lockTtlMs,
        this.options.initialOffset,
        this.membership.generation,
        this.metrics,
      );
      // One this process could not read that another member holds now is read there: no longer reported.
      attempt.forEach((partition, i) => acquired[i] === null && this.unread.delete(partition) && this.reportUnread());
      for (const started of await this.startReadable(acquired)) if (started) missing--;
    }
  }

  /**
   * Opens the read connection of every partition just taken, and starts the workers of those that
   * answer. The others are not held: their leases go back at once (one whose last holder crashed is
   * left to expire instead, so the next owner still counts that delivery), and a warning names them.
   */
  private async startReadable(acquired: ReadonlyArray<AcquiredLease | null>): Promise<boolean[]> {
    // A third of the lease TTL: the renewals run at that pace, and a Redis slower than that loses leases anyway.
    const timeoutMs = Math.floor(this.options.lockTtlMs / 3);
    const opened = await Promise.all(acquired.map((taken) => (taken ? openReadConnection(this.redis, timeoutMs) : Promise.resolve(null))));
    const refused: Array<{ partition: number; cause: string }> = [];
    const started = acquired.map((taken, i) => {
      const read = opened[i];
      if (!taken || !read) return false;
      if ('connection' in read) return this.startWorker(taken, read.connection);
      refused.push({ partition: taken.lease.partition, cause: read.refused });
      return false;
    });
    if (refused.length === 0) return started;
    const retryAt = performance.now() + this.options.lockTtlMs;
    for (const { partition, cause } of refused) this.unread.set(partition, { cause, retryAt });
    this.reportUnread();
    await Promise.all(
      refused.map(({ partition }) => {
        const taken = acquired.find((a) => a?.lease.partition === partition);
        return taken && !taken.recovering ? taken.lease.release().catch(() => undefined) : Promise.resolve();
      }),
    );
    await this.announce(this.name);
    return started;
  }

  /**
   * Hands back the partitions whose read connection has been down for `readDownMs` while this process's
   * heartbeat and renewals got through (Redis answers, but refuses this connection: `maxclients` after
   * the connection dropped), so another member can read them. Asked once per tick, from what the
   * connections already know: no command unless one is handed back.
   */
  private async handBackUnreadable(owned: PartitionWorker[]): Promise<void> {
    const now = performance.now();
    const down: PartitionWorker[] = [];
    for (const worker of [...this.notReading.keys()]) if (!owned.includes(worker)) this.notReading.delete(worker);
    for (const worker of owned) {
      if (worker.reading || !worker.active) {
        this.notReading.delete(worker);
        continue;
      }
      const since = this.notReading.get(worker) ?? now;
      this.notReading.set(worker, since);
      if (now - since >= this.readDownMs) down.push(worker);
    }
    if (down.length === 0) return;
    const cause = await explainRefusal(this.redis, `its read connection has been down for ${this.readDownMs} ms`);
    const retryAt = performance.now() + this.options.lockTtlMs;
    for (const worker of down) {
      this.notReading.delete(worker);
      this.unread.set(worker.partition, { cause, retryAt });
    }
    this.reportUnread();
    // Not waited for here: a handler in hand may take its time, and the tick goes on meanwhile.
    void Promise.all(down.map((worker) => worker.stopGracefully(this.options.shutdownTimeoutMs, true))).then(() =>
      this.announce(this.name),
    );
  }

  /**
   * How long a read connection may be down while the rest answers before its partition is handed back: a
   * lease TTL, and at least `READ_RECONNECT_GRACE_MS`, which outlasts ioredis's reconnect backoff (2 s at
   * most by default), so the readers coming back after a Redis restart behind the main connection keep their partitions.
   */
  private get readDownMs(): number {
    return Math.max(this.options.lockTtlMs, READ_RECONNECT_GRACE_MS);
  }

  /** Says at warn, once per change, which partitions this process gave back because it cannot read them, and why. */
  private reportUnread(): void {
    const partitions = [...this.unread.keys()].sort((a, b) => a - b);
    const causes = [...new Set([...this.unread.values()].map((u) => u.cause))];
    const text = partitions.length === 0 ? '' : `${partitions.join(', ')}: ${causes.join('; ')}`;
    if (text === this.unreadReported) return;
    this.unreadReported = text;
    if (text === '') return;
    const msg =
      `Group "${this.name}": could not open a read connection for ${partitions.length === 1 ? 'partition' : 'partitions'} ${partitions.join(', ')} ` +
      `(${causes.join('; ')}); not holding them, so another member can take them. This process tries them again every ${this.options.lockTtlMs} ms ` +
      '(lockTtlMs). Each partition a process works needs its own connection: raise Redis maxclients, or run fewer partitions per process.';
    this.logger.warn(logRecord(msg, { group: this.name, partitions, causes }));
  }

  /**
   * Bars the other members that lack wanted types from the partitions (see
   * `MemberBars`). A failure is said and the balance goes on: the bars are
   * tried again next tick, and the lacking members still stop on their own.
   */
  private async barLacking(): Promise<void> {
    try {
      const { gaps, able } = this.membership.wants;
      const taken = await this.bars.update(gaps, able);
      if (taken.length === 0) return;
      const msg = `Group "${this.name}": took partitions ${taken.join(', ')} back from workers that lack handlers its live members want (or are no live member)`;
      this.logger.log(logRecord(msg, { group: this.name, partitions: taken }));
    } catch (error) {
      const msg = `Group "${this.name}": could not bar members that lack wanted handlers (${describeError(error)}); trying again next tick`;
      this.logger.warn(logRecord(msg, { group: this.name }));
    }
  }

  /** Hands back every partition this worker works, because it lacks handlers for `lacking`, which live members want. */
  private async yieldAll(lacking: string[]): Promise<void> {
    this.reportLacking(lacking);
    const owned = this.activeWorkers();
    if (owned.length === 0) return;
    // Not waited for, as a rebalance's hand-back: the ticks renew these leases while their handlers finish.
    void Promise.all(owned.map((w) => w.stopGracefully(this.options.shutdownTimeoutMs, true))).then(() => this.announce(this.name));
  }

  /**
   * When no live member handles every wanted type (a deploy that renamed a
   * handler, overlapping versions), nobody may work the partitions and the
   * group handles nothing: said at warn, once per change, naming who lacks what.
   */
  private reportStalled(): void {
    const { wanted, able, gaps } = this.membership.wants;
    const text = able.length === 0 && Object.keys(gaps).length > 0 ? JSON.stringify(gaps) : '';
    if (text === this.stalled) return;
    this.stalled = text;
    if (text === '') return;
    const who = Object.entries(gaps)
      .map(([member, missing]) => `${member} lacks ${missing.join(', ')}`)
      .join('; ');
    const msg =
      `Group "${this.name}" works nothing: its live members want ${wanted.join(', ')} and none handles them all (${who}). ` +
      'Deploy a handler change in two steps: first add the new handler next to the old one everywhere, then remove the old one.';
    this.logger.warn(logRecord(msg, { group: this.name, wanted, gaps }));
  }

  /** Says at warn, once per change, which wanted types this worker lacks (and at log when it lacks none again). */
  private reportLacking(lacking: string[]): void {
    const text = lacking.join(', ');
    if (text === this.lacking) return;
    const before = this.lacking;
    this.lacking = text;
    if (text === '') {
      const msg = `Group "${this.name}": this worker handles every event type its live members want again (it lacked ${before}); it takes partitions again`;
      this.logger.log(logRecord(msg, { group: this.name }));
      return;
    }
    const msg =
      `Group "${this.name}": live members of this group handle ${text}, which this worker has no handler for; ` +
      'it works no partition (so none is committed past those events) until every member that wants them is gone. ' +
      'Expected during a rolling deploy that adds a handler; otherwise give the workers of one group the same handlers.';
    this.logger.warn(logRecord(msg, { group: this.name, lacking }));
  }

  /** Starts working a partition whose lease was just taken; false when this consumer stopped meanwhile. */
  private startWorker({ lease, committed, recovering }: AcquiredLease, connection?: Redis | Cluster): boolean {
    if (!this.running) {
      // Stopped while the acquire was in flight: give the lease straight back.
      connection?.disconnect();
      void lease.release().catch(() => undefined);
      return false;
    }
    const { partition } = lease;
    if (this.unread.delete(partition)) {
      const msg = `Group "${this.name}": reads partition ${partition} again (its read connection opened)`;
      this.logger.log(logRecord(msg, { group: this.name, partition }));
      this.reportUnread();
    }
    // Its own lease lapsed while this process lived (a stall of its event loop or of Redis): nobody died
    // handling the entry after the offset, so no delivery is counted. Another holder between, or another
    // process (an earlier run of this one too), did not release it: that is counted.
    const previous = this.lastHeld.get(partition);
    const resumed = recovering && previous !== undefined && followsOwnLease(previous.token, lease.token);
    const crashed = recovering && !resumed;
    const stalls = resumed && previous.committed === committed ? previous.stalls + 1 : 0;
    const parking = this.parkingFor(partition);
    const worker = new PartitionWorker({
      lease,
      committed,
      recovering: crashed,
      stats: this.stats,
      metrics: this.metrics,
      redis: this.redis,
      processor: this.processor,
      semaphore: this.semaphore,
      options: this.options,
      onCommitted: (p, offset) => this.commitListeners.forEach((listener) => listener(p, offset)),
      parking,
      connection,
    });
    this.workers.set(partition, worker);
    this.lastHeld.set(partition, { token: lease.token, committed, stalls });
    worker.start((ended) => this.onWorkerEnd(ended));
    this.metrics.emit('onLeaseAcquired', this.name, partition);
    const how = crashed
      ? ' from a worker that did not release it (recovering one entry at a time, counting deliveries)'
      : resumed
        ? ' again after its own lease lapsed (this process stalled past lockTtlMs or lost Redis; not counted as a crash)'
        : '';
    const msg = `Group "${this.name}": took partition ${partition} at offset ${committed}${how}`;
    this.logger.log(logRecord(msg, { group: this.name, partition, offset: committed, recovering: crashed, resumed }));
    if (stalls > 0 && stalls % STALLS_BEFORE_WARNING === 0) {
      // Stalls are not counted towards maxDeliveries, so a handler that blocks the event loop past the lease on
      // every call would be tried without end: this is how an operator finds it.
      const warning =
        `Group "${this.name}" partition ${partition}: its lease lapsed ${stalls} times in a row with the offset at ${committed}; ` +
        `if a handler blocks the event loop past lockTtlMs (${this.options.lockTtlMs} ms) on the entry after it, ` +
        'it is tried again and again (stalls of a live process are not counted towards maxDeliveries): keep CPU-bound work off the event loop';
      this.logger.warn(logRecord(warning, { group: this.name, partition, offset: committed, stalls }));
    }
    return true;
  }

  /** A fresh set of parked lines for a worker taking `partition` (`'key'` and `'unordered'` ordering), registered where the processors find it. */
  private parkingFor(partition: number): PartitionWorkerParams['parking'] {
    const { ordering, redelivery } = this.options;
    const mode = ordering === 'partition' ? 'key' : ordering;
    const lines = new ParkedLines({ mode, redelivery, quick: this.options, now: () => this.redis.clock.now() });
    this.parked.set(partition, lines);
    const inherited = this.inheritedProcessor && { processor: this.inheritedProcessor };
    return { lines, retryProcessor: this.retryProcessor, ...(inherited && { inherited }) };
  }

  private onWorkerEnd(worker: PartitionWorker): void {
    // Wait for its stop to finish (commit, release) before the slot counts as free.
    // A stop settles; .catch only so that nothing here could ever be an unhandled rejection (a process-ending one by default).
    void worker
      .stopped(this.options.shutdownTimeoutMs)
      .catch(() => undefined)
      .then(() => {
        if (this.workers.get(worker.partition) === worker) this.workers.delete(worker.partition);
        if (worker.parkedLines && this.parked.get(worker.partition) === worker.parkedLines) this.parked.delete(worker.partition);
        if (!worker.wasLost) {
          this.metrics.emit('onLeaseReleased', this.name, worker.partition);
          return;
        }
        this.metrics.emit('onLeaseLost', this.name, worker.partition);
        // Its revoked lease cleared: the other members may take the partition now rather than at their next tick.
        if (worker.clearedRevokedLease) void this.announce(this.name);
        if (this.running) void this.rebalancer.run().catch(() => undefined);
      });
  }

  private activeWorkers(): PartitionWorker[] {
    return [...this.workers.values()].filter((w) => w.active);
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
}
