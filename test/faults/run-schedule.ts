import 'reflect-metadata';
import { INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import {
  DeadLetter,
  EventrailAdmin,
  EventrailModule,
  EventrailPublisher,
  PublishInput,
  PublishManyError,
  PublishResult,
  RedisFullError,
} from '../../lib';
import { readEntry } from '../../lib/wire/codec';
import { decodeDeadLetter } from '../../lib/wire/dead-letter.codec';
import { EventrailKeys } from '../../lib/redis/keys';
import { killQuietly } from '../support/child-processes';
import { deletePrefix, uniquePrefix, waitFor } from '../support/helpers';
import { chaosKeys, decodeAttempt, FuzzData } from './support/chaos-protocol';
import type { DurableRedis } from './support/durable-redis';
import { hasParkedLines, offsetsCoverLog } from './support/log-checks';
import { ChaosChild, Supervisor, WORKER_FILE } from './support/supervisor';
import { PathProxy } from './support/path-proxy';
import { Accepted, checkRun, FuzzLogEntry, PublishCall, RunRecord, Violation, Window } from './invariants';
import { OffsetSampler, ResetWindow } from './offset-sampler';
import { EventSpec, FAULT_KINDS, FaultKind, Schedule, Step } from './schedule';
import { spawnTypeScript } from '../support/child-processes';
import { chaosWorkerEnv, EVENTS, GROUPS } from './support/chaos-protocol';
import { WantSampler } from './want-sampler';

const READY_TIMEOUT_MS = 120_000;
/** The chaos worker, started directly (outside the supervisor's slots) as the older version of a rolling deploy. */
const OLDER_WORKER_FILE = 'test/faults/support/chaos-worker.ts';
const DRAIN_TIMEOUT_MS = 60_000;
/** How long a kill or freeze waits for its slot's worker to be ready (a replacement is still starting). */
const WORKER_WAIT_MS = 20_000;

/** What one schedule did, and what the checks found. */
export interface RunFigures {
  seed: number;
  ms: number;
  published: number;
  accepted: number;
  rejected: number;
  /** Events a full Redis refused (the publish rejected with RedisFullError, or a PublishManyError caused by one). */
  refusedFull: number;
  /** Rejected publish calls by error (`PublishManyError(RedisFullError)`, ...). */
  rejections: Record<string, number>;
  logEntries: number;
  attempts: number;
  handlings: number;
  /** Handlings of an entry by a group past its first (redeliveries, resets). */
  repeatHandlings: number;
  deadLetters: number;
  replayed: number;
  offsetSamples: number;
  /** Faults carried out, by kind (a kill with no worker to kill, a reset or replay that Redis refused, are not counted). */
  faults: Record<FaultKind, number>;
  /** Faults that could not be carried out, with why. */
  skipped: string[];
  violations: Violation[];
  /** What was checked, when some check failed (for a closer look). */
  record?: RunRecord;
}

/**
 * Runs one schedule on `server` (a Redis of the caller's, with AOF) under a
 * prefix of its own: starts the workers under a supervisor, takes the steps,
 * waits for every group to catch up, collects what happened, checks the
 * invariants, and stops everything it started. The prefix is deleted after,
 * unless `keep`.
 */
export async function runSchedule(server: DurableRedis, schedule: Schedule, { keep = false } = {}): Promise<RunFigures> {
  const began = Date.now();
  const prefix = uniquePrefix(`fuzz-${schedule.seed}`);
  const keys = new EventrailKeys(prefix, schedule.partitions);
  const redis = new Redis(server.url);
  const proxies: PathProxy[] = [];
  redis.on('error', () => undefined); // it reconnects after each restart
  const supervisor = new Supervisor(
    {
      mode: 'fuzz',
      redisUrl: server.url,
      prefix,
      partitions: schedule.partitions,
      consumer: schedule.consumer,
      fuzzGroups: schedule.groups.length,
    },
    schedule.workers,
    // Through the slot's own path to Redis, when the schedule cuts one.
    { file: WORKER_FILE, slotEnv: (slot): Record<string, string> => (proxies[slot] ? { EVENTRAIL_REDIS_URL: proxies[slot].url } : {}) },
  );
  let app: INestApplicationContext | undefined;
  const sampler = new OffsetSampler(server.url, keys, schedule.groups);
  const wants = new WantSampler(server.url, keys, GROUPS.fuzzIdem, EVENTS.fuzzFirst);
  const state = new RunState(schedule);
  try {
    // A schedule that cuts a worker's path gives each slot a path of its own (the older workers of a rolling deploy go direct).
    if (schedule.steps.some((step) => step.kind === 'cut-worker'))
      for (let slot = 0; slot < schedule.workers; slot++) proxies.push(await PathProxy.start(server.url));
    app = await createPublisherApp(server.url, prefix, schedule.partitions);
    supervisor.start();
    await waitFor(
      () => supervisor.readyChildren().length === schedule.workers,
      () => `${schedule.workers} workers ready:\n${supervisor.describe()}`,
      READY_TIMEOUT_MS,
    );
    sampler.start();
    wants.start();
    const steps = new StepRunner(schedule, state, server, supervisor, app, redis, prefix, proxies);
    await steps.runAll();
    const drainFailure = await drain(redis, keys, schedule, supervisor);
    await sampler.stop();
    await wants.stop();
    await supervisor.stop();
    const record = await collect(redis, keys, schedule, state, sampler, supervisor, drainFailure);
    if (state.olders.length > 0) {
      // An older member's details count until its heartbeat expires after it is gone.
      const linger = 2 * schedule.consumer.heartbeatTtlMs;
      record.rolling = { lives: state.olders.map(({ from, to }) => ({ from, to: to + linger })), samples: wants.samples };
    }
    return figures(schedule, state, record, sampler, Date.now() - began);
  } finally {
    await sampler.stop().catch(() => undefined);
    await wants.stop().catch(() => undefined);
    await supervisor.stop();
    await app?.close().catch(() => undefined);
    for (const proxy of proxies) await proxy.close();
    if (!keep) await deletePrefix(redis, prefix).catch(() => undefined);
    redis.disconnect();
  }
}

/** What the steps leave behind for the checks and the figures. */
class RunState {
  readonly accepted: Accepted[] = [];
  rejected = 0;
  readonly resets: ResetWindow[] = [];
  readonly replayed = new Map<string, DeadLetter[]>();
  readonly faults = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  readonly skipped: string[] = [];
  readonly freezes: Array<{ pid: number; from: number; to: number }> = [];
  /** Older workers of rolling deploys: pid, spawned and exited (Date.now(); 0 while running). */
  readonly olders: Array<{ pid: number; from: number; to: number }> = [];
  /** Every publish call: when, what came of it. */
  readonly publishes: PublishCall[] = [];
  /** When Redis refused writes (over maxmemory), from the limit set until it was lifted (Date.now()). */
  readonly fills: Window[] = [];
  /** When Redis did not answer: killed until restarted, or SIGSTOPped until SIGCONT (Date.now()). */
  readonly outages: Window[] = [];
  /** Worker paths cut: slot, pid, from and to (Date.now()). */
  readonly cuts: Array<{ slot: number; pid: number; from: number; to: number }> = [];

  constructor(readonly schedule: Schedule) {}
}

class StepRunner {
  /** Workers SIGSTOPped now, by pid: the timer that sends SIGCONT, and a promise that settles when it has. */
  private readonly frozen = new Map<number, { timer: NodeJS.Timeout; thawed: Promise<void> }>();
  /** Older workers of rolling deploys still running, by pid: the timer that stops them, and their exit. */
  private readonly olders = new Map<number, { timer: NodeJS.Timeout; exited: Promise<void> }>();
  /**
   * Faults that end on a timer (a full Redis, a stalled one, a cut path): what ends each one now (sent at
   * once on a failure), and a promise that settles once it has.
   */
  private readonly ending = new Set<{ timer: NodeJS.Timeout; end: () => Promise<void>; ended: Promise<void> }>();
  private readonly publisher: EventrailPublisher;
  private readonly admin: EventrailAdmin;

  constructor(
    private readonly schedule: Schedule,
    private readonly state: RunState,
    private readonly server: DurableRedis,
    private readonly supervisor: Supervisor,
    app: INestApplicationContext,
    private readonly redis: Redis,
    private readonly prefix: string,
    /** One per slot when the schedule cuts a worker's path. */
    private readonly proxies: readonly PathProxy[],
  ) {
    this.publisher = app.get(EventrailPublisher);
    this.admin = app.get(EventrailAdmin);
  }

  /** Takes every step, then waits for the frozen workers' SIGCONT (on a failure, sends it at once). */
  async runAll(): Promise<void> {
    let ok = false;
    try {
      for (const [index, step] of this.schedule.steps.entries()) await this.run(index, step);
      ok = true;
    } finally {
      if (ok) await Promise.all([...this.frozen.values()].map((f) => f.thawed));
      if (ok) await Promise.all([...this.olders.values()].map((o) => o.exited));
      if (ok) await Promise.all([...this.ending].map((e) => e.ended));
      for (const e of [...this.ending]) {
        clearTimeout(e.timer);
        await e.end().catch(() => undefined);
      }
      for (const [pid, { timer, exited }] of this.olders) {
        clearTimeout(timer);
        killQuietly(pid, 'SIGKILL');
        await exited;
      }
      this.olders.clear();
      for (const [pid, { timer }] of this.frozen) {
        clearTimeout(timer);
        killQuietly(pid, 'SIGCONT');
        for (const f of this.state.freezes) if (f.pid === pid && f.to === 0) f.to = Date.now();
      }
      this.frozen.clear();
    }
  }

  private async run(index: number, step: Step): Promise<void> {
    switch (step.kind) {
      case 'publish':
        return this.publish(
          step.events.map((n) => this.schedule.events[n]),
          step.many,
        );
      case 'pause':
        return pause(step.ms);
      case 'kill-worker': {
        const child = await this.readyWorker(step.slot);
        if (!child || !child.kill()) return this.skip(index, step.kind, `no ready worker in slot ${step.slot}`);
        this.state.faults[step.kind]++;
        return;
      }
      case 'freeze-worker': {
        const child = await this.readyWorker(step.slot);
        if (!child || !killQuietly(child.pid, 'SIGSTOP')) return this.skip(index, step.kind, `no running worker in slot ${step.slot}`);
        const pid = child.pid;
        const freeze = { pid, from: Date.now(), to: 0 };
        this.state.freezes.push(freeze);
        let timer!: NodeJS.Timeout;
        const thawed = new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            this.frozen.delete(pid);
            killQuietly(pid, 'SIGCONT');
            freeze.to = Date.now();
            resolve();
          }, step.ms);
        });
        this.frozen.set(pid, { timer, thawed });
        this.state.faults[step.kind]++;
        return;
      }
      case 'crash-redis': {
        // A restarted server has no maxmemory (CONFIG SET is not saved): a full Redis ends here.
        for (const fill of this.state.fills) if (fill.to === 0) fill.to = Date.now();
        const window: Window = { from: Date.now(), to: 0 };
        this.state.outages.push(window);
        await this.server.crashAndRestart(step.downMs);
        window.to = Date.now();
        this.state.faults[step.kind]++;
        return;
      }
      case 'reset-offsets': {
        const window: ResetWindow = { group: step.group, began: Date.now(), ended: 0 };
        this.state.resets.push(window);
        try {
          await this.admin.resetOffsets(step.group, 'start', { force: true });
          this.state.faults[step.kind]++;
        } catch (error) {
          this.skip(index, step.kind, String(error));
        } finally {
          window.ended = Date.now();
        }
        return;
      }
      case 'replay-dead-letters':
        return this.replay(index, step.group);
      case 'rolling-deploy':
        return this.rollingDeploy(step.ms, step.leave);
      case 'fill-redis':
        return this.fillRedis(index, step.ms);
      case 'stall-redis':
        return this.stallRedis(step.ms);
      case 'cut-worker':
        return this.cutWorker(index, step.slot, step.ms);
    }
  }

  /** Runs `end` after `ms` (or at once when the run fails), exactly once. */
  private endAfter(ms: number, end: () => Promise<void> | void): void {
    let resolve!: () => void;
    const ended = new Promise<void>((r) => (resolve = r));
    let done = false;
    const entry = {
      timer: setTimeout(() => void entry.end(), ms),
      end: async (): Promise<void> => {
        if (done) return;
        done = true;
        try {
          await end();
        } finally {
          this.ending.delete(entry);
          resolve();
        }
      },
      ended,
    };
    this.ending.add(entry);
  }

  /**
   * Sets `maxmemory` to half the memory Redis uses now (policy `noeviction`, the default), so every write
   * that may grow memory is refused with OOM; `ms` later, no limit again. A Redis restarted meanwhile has
   * no limit already (CONFIG SET is not saved), and the window ends there for the checks.
   */
  private async fillRedis(index: number, ms: number): Promise<void> {
    // One at a time: the first to end would lift the other's limit.
    if (this.state.fills.some((w) => w.to === 0)) return this.skip(index, 'fill-redis', 'Redis is full already');
    try {
      const info = await this.redis.info('memory');
      const used = Number(/used_memory:(\d+)/.exec(info)?.[1]);
      if (!Number.isFinite(used) || used <= 0) return this.skip(index, 'fill-redis', `no used_memory in INFO: ${info.slice(0, 200)}`);
      await this.redis.config('SET', 'maxmemory-policy', 'noeviction');
      await this.redis.config('SET', 'maxmemory', String(Math.floor(used / 2)));
    } catch (error) {
      return this.skip(index, 'fill-redis', String(error));
    }
    const window: Window = { from: Date.now(), to: 0 };
    this.state.fills.push(window);
    const pid = this.server.pid;
    this.endAfter(ms, async () => {
      // On a server restarted meanwhile, the limit is gone already (and the window ended at the crash).
      if (this.server.pid !== pid) return;
      window.to = Date.now();
      await this.redis.config('SET', 'maxmemory', '0');
    });
    this.state.faults['fill-redis']++;
  }

  /** SIGSTOPs the redis-server by pid; SIGCONT `ms` later (a server killed and restarted meanwhile is a new pid). */
  private stallRedis(ms: number): void {
    const pid = this.server.pid;
    if (!killQuietly(pid, 'SIGSTOP')) return;
    const window: Window = { from: Date.now(), to: 0 };
    this.state.outages.push(window);
    this.endAfter(ms, () => {
      killQuietly(pid, 'SIGCONT');
      window.to = Date.now();
    });
    this.state.faults['stall-redis']++;
  }

  /** Silences the path of the worker in `slot` (its proxy) for `ms`; a worker started in the slot meanwhile is cut too. */
  private async cutWorker(index: number, slot: number, ms: number): Promise<void> {
    const proxy = this.proxies[slot];
    if (!proxy || proxy.isCut) return this.skip(index, 'cut-worker', `no path of its own for slot ${slot}, or cut already`);
    const child = await this.readyWorker(slot);
    if (!child) return this.skip(index, 'cut-worker', `no ready worker in slot ${slot}`);
    proxy.silence();
    const cut = { slot, pid: child.pid, from: Date.now(), to: 0 };
    this.state.cuts.push(cut);
    this.endAfter(ms, () => {
      proxy.heal();
      cut.to = Date.now();
    });
    this.state.faults['cut-worker']++;
  }

  /** Starts a worker of the older version next to the others; `ms` after it joined, it leaves by `leave`. */
  private rollingDeploy(ms: number, leave: 'SIGTERM' | 'SIGKILL'): void {
    const { schedule } = this;
    const config = { mode: 'fuzz' as const, redisUrl: this.server.url, prefix: this.prefix, partitions: schedule.partitions };
    const env = chaosWorkerEnv({ ...config, consumer: schedule.consumer, fuzzGroups: schedule.groups.length, older: true });
    const child = spawnTypeScript(OLDER_WORKER_FILE, { env });
    // Its logs are not read: drained, so a full pipe never blocks it.
    child.stdout?.resume();
    child.stderr?.resume();
    const pid = child.pid as number;
    const life = { pid, from: Date.now(), to: 0 };
    this.state.olders.push(life);
    const exited = new Promise<void>((resolve) =>
      child.once('exit', () => {
        life.to = Date.now();
        this.olders.delete(pid);
        resolve();
      }),
    );
    const entry = { timer: setTimeout(() => undefined, 0), exited };
    // It stays `ms` once it has joined (its startup takes seconds), then leaves.
    child.on('message', (message: { type?: string }) => {
      if (message.type === 'ready') entry.timer = setTimeout(() => killQuietly(pid, leave), ms);
    });
    this.olders.set(pid, entry);
    this.state.faults['rolling-deploy']++;
  }

  /**
   * The worker of `slot` once it is ready and not frozen (a replacement
   * started after a kill takes seconds); undefined if none is within the wait.
   */
  private async readyWorker(slot: number): Promise<ChaosChild | undefined> {
    const find = (): ChaosChild | undefined => this.supervisor.readyChildren().find((c) => c.slot === slot && !this.frozen.has(c.pid));
    return waitFor(find, `a ready worker in slot ${slot}`, WORKER_WAIT_MS, 50).catch(() => undefined);
  }

  private async publish(events: EventSpec[], many: boolean): Promise<void> {
    const inputs: PublishInput[] = events.map((e) => ({
      event: e.event,
      data: e.data,
      ...(e.key !== undefined ? { key: e.key } : {}),
      ...(e.partition !== undefined ? { partition: e.partition } : {}),
    }));
    const call: PublishCall = { events: events.map((e) => e.n), many, from: Date.now(), to: 0, refused: [] };
    this.state.publishes.push(call);
    let results: Array<PublishResult | undefined>;
    try {
      if (many) results = await this.publisher.publishMany(inputs);
      else {
        const [{ event, data, ...options }] = inputs;
        results = [await this.publisher.publish(event, data, options)];
      }
    } catch (error) {
      // Redis down, full or silent: the events not appended are not accepted (and not retried); those with
      // no answer may be in the log anyway. A publishMany says which it appended (those are accepted).
      call.error = describePublishError(error);
      results = error instanceof PublishManyError ? [...error.results] : [];
      if (error instanceof PublishManyError) call.refused = events.filter((_, i) => error.outcomes[i] === 'not-appended').map((e) => e.n);
      else if (error instanceof RedisFullError) call.refused = events.map((e) => e.n);
    } finally {
      call.to = Date.now();
    }
    events.forEach((e, i) => {
      const r = results[i];
      if (r) this.state.accepted.push({ n: e.n, id: r.id, partition: r.partition, offset: r.offset });
      else this.state.rejected++;
    });
  }

  /** Cures every dead letter the group has now (their handlers succeed from then on) and replays them. */
  private async replay(index: number, group: string): Promise<void> {
    try {
      const letters = await this.admin.deadLetters(group, { count: 1000 });
      if (letters.length === 0) return this.skip(index, 'replay-dead-letters', `${group} has no dead letters`);
      await this.redis.sadd(chaosKeys.fuzzCured(this.prefix), ...letters.map((d) => `${group}|${d.eventId}`));
      const list = this.state.replayed.get(group) ?? [];
      this.state.replayed.set(group, list);
      list.push(...letters);
      await this.admin.replayDeadLetters(
        group,
        letters.map((d) => d.id),
      );
      this.state.faults['replay-dead-letters']++;
    } catch (error) {
      this.skip(index, 'replay-dead-letters', String(error));
    }
  }

  private skip(index: number, kind: FaultKind, why: string): void {
    this.state.skipped.push(`#${index} ${kind}: ${why}`);
  }
}

/** A publish's error by name; a PublishManyError's with its cause's: `PublishManyError(RedisFullError)`. */
function describePublishError(error: unknown): string {
  const name = (e: unknown): string => (e instanceof Error ? e.constructor.name : typeof e);
  return error instanceof PublishManyError ? `${name(error)}(${name(error.cause)})` : name(error);
}

/** The test's own app: publisher and admin, no handlers. Library logs off (the figures say what happened). */
async function createPublisherApp(url: string, prefix: string, partitions: number): Promise<INestApplicationContext> {
  @Module({ imports: [EventrailModule.forRoot({ redis: url, prefix, partitions })] })
  class FuzzPublisherModule {}
  return NestFactory.createApplicationContext(FuzzPublisherModule, { logger: false });
}

/** Waits until every group's committed offsets reach the end of every partition; returns why not, on a timeout. */
async function drain(redis: Redis, keys: EventrailKeys, schedule: Schedule, supervisor: Supervisor): Promise<string | undefined> {
  try {
    await waitFor(
      async () => {
        for (const group of schedule.groups) if (!(await offsetsCoverLog(redis, keys, group))) return false;
        // Parked modes: parked messages are not done either; every line must have drained.
        if (schedule.consumer.ordering !== 'partition') {
          for (const group of schedule.groups) if (await hasParkedLines(redis, keys, group)) return false;
        }
        return true;
      },
      'every group at the end of the log, nothing parked',
      DRAIN_TIMEOUT_MS,
      100,
    );
    return undefined;
  } catch (error) {
    const tails = supervisor.children.slice(-schedule.workers).map((c) => c.describe());
    return `${String(error)}\n${tails.join('\n---\n')}`;
  }
}

async function collect(
  redis: Redis,
  keys: EventrailKeys,
  schedule: Schedule,
  state: RunState,
  sampler: OffsetSampler,
  supervisor: Supervisor,
  drainFailure: string | undefined,
): Promise<RunRecord> {
  const log: FuzzLogEntry[][] = [];
  for (let p = 0; p < keys.partitions; p++) {
    const entries = await redis.xrange(keys.stream(p), '-', '+');
    log.push(
      entries.map(([offset, list]) => {
        const fields: Record<string, string> = {};
        for (let i = 0; i + 1 < list.length; i += 2) fields[list[i]] = list[i + 1];
        return {
          partition: p,
          offset,
          // The event id as consumers see it: the entry's own, or the one derived from its position.
          id: (readEntry(offset, list, { partition: p, logTag: keys.logTag }) as { id: string }).id,
          event: fields.event,
          key: fields.key ?? null,
          to: fields.to,
          data: JSON.parse(fields.data) as FuzzData,
        };
      }),
    );
  }
  const attempts = (await redis.lrange(chaosKeys.fuzzAttempts(keys.prefix), 0, -1)).map(decodeAttempt);
  const deadLetters = new Map<string, { current: DeadLetter[]; replayed: DeadLetter[] }>();
  for (const group of schedule.groups) {
    const current = await readDeadLetters(redis, keys, group);
    deadLetters.set(group, { current, replayed: state.replayed.get(group) ?? [] });
  }
  // A worker that was still starting when Redis went down, filled up (documented: RedisFullError joining its
  // group), stalled, or its path was cut, fails its startup (the library refuses to start without Redis unless
  // allowDegradedStart) and the supervisor starts another: expected, noted, not a violation.
  const outages = (['crash-redis', 'fill-redis', 'stall-redis', 'cut-worker'] as const).some((kind) => state.faults[kind] > 0);
  const failedStartups = supervisor.unexpectedExits.filter((e) => outages && !e.wasReady);
  for (const e of failedStartups) {
    const tail =
      supervisor.children
        .find((c) => c.pid === e.pid)
        ?.lines.slice(-3)
        .join(' / ') ?? '';
    state.skipped.push(`worker ${e.pid} in slot ${e.slot} failed its startup in a run with Redis outages: ${tail.slice(0, 300)}`);
  }
  // With the worker's last log lines: why it exited is otherwise lost with the process.
  const unexpectedExits = [...supervisor.unexpectedExits.filter((e) => !failedStartups.includes(e)), ...supervisor.crashes].map((e) => {
    const tail = supervisor.children.find((c) => c.pid === e.pid)?.lines.slice(-10) ?? [];
    return `worker exit not caused by the test: ${JSON.stringify(e)}${tail.length > 0 ? `; its last lines:\n    ${tail.join('\n    ')}` : ''}`;
  });
  return {
    schedule,
    accepted: state.accepted,
    log,
    attempts,
    deadLetters,
    backwardMoves: sampler.backwardMoves(state.resets),
    unexpectedExits,
    freezes: state.freezes,
    drainFailure,
    publishes: state.publishes,
    fills: state.fills,
    outages: state.outages,
    cuts: state.cuts,
  };
}

/** A group's dead letters, decoded as the admin decodes them. */
async function readDeadLetters(redis: Redis, keys: EventrailKeys, group: string): Promise<DeadLetter[]> {
  const entries = await redis.xrange(keys.deadLetters(group), '-', '+');
  return entries.map(([id, fields]) => decodeDeadLetter(id, fields));
}

function figures(schedule: Schedule, state: RunState, record: RunRecord, sampler: OffsetSampler, ms: number): RunFigures {
  const handlings = record.attempts.filter((a) => a.outcome === 'H');
  const distinct = new Set(handlings.map((a) => `${a.group}|${a.partition}|${a.offset}`));
  let replayed = 0;
  for (const list of state.replayed.values()) replayed += list.length;
  const violations = checkRun(record);
  let deadLetters = replayed;
  for (const { current } of record.deadLetters.values()) deadLetters += current.length;
  return {
    seed: schedule.seed,
    ms,
    published: state.accepted.length + state.rejected,
    accepted: state.accepted.length,
    rejected: state.rejected,
    rejections: state.publishes.reduce<Record<string, number>>((tally, c) => {
      if (c.error) tally[c.error] = (tally[c.error] ?? 0) + 1;
      return tally;
    }, {}),
    refusedFull: state.publishes.filter((c) => c.error?.includes('RedisFullError')).reduce((sum, c) => sum + c.refused.length, 0),
    logEntries: record.log.flat().length,
    attempts: record.attempts.length,
    handlings: handlings.length,
    repeatHandlings: handlings.length - distinct.size,
    deadLetters,
    replayed,
    offsetSamples: sampler.samples,
    faults: state.faults,
    skipped: state.skipped,
    violations,
    ...(violations.length > 0 ? { record } : {}),
  };
}

/** Paces the schedule (its own pauses); no check depends on it. */
function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
