import 'reflect-metadata';
import { INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import Redis from 'ioredis';
import { DeadLetter, EventrailAdmin, EventrailModule, EventrailPublisher, PublishInput, PublishResult } from '../../lib';
import { readEntry } from '../../lib/wire/codec';
import { decodeDeadLetter } from '../../lib/wire/dead-letter.codec';
import { EventrailKeys } from '../../lib/redis/keys';
import { killQuietly } from '../support/child-processes';
import { deletePrefix, uniquePrefix, waitFor } from '../support/helpers';
import { chaosKeys, decodeAttempt, FuzzData } from './support/chaos-protocol';
import type { DurableRedis } from './support/durable-redis';
import { offsetsCoverLog } from './support/log-checks';
import { ChaosChild, Supervisor } from './support/supervisor';
import { Accepted, checkRun, FuzzLogEntry, RunRecord, Violation } from './invariants';
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
  );
  let app: INestApplicationContext | undefined;
  const sampler = new OffsetSampler(server.url, keys, schedule.groups);
  const wants = new WantSampler(server.url, keys, GROUPS.fuzzIdem, EVENTS.fuzzFirst);
  const state = new RunState(schedule);
  try {
    app = await createPublisherApp(server.url, prefix, schedule.partitions);
    supervisor.start();
    await waitFor(
      () => supervisor.readyChildren().length === schedule.workers,
      () => `${schedule.workers} workers ready:\n${supervisor.describe()}`,
      READY_TIMEOUT_MS,
    );
    sampler.start();
    wants.start();
    const steps = new StepRunner(schedule, state, server, supervisor, app, redis, prefix);
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

  constructor(readonly schedule: Schedule) {}
}

class StepRunner {
  /** Workers SIGSTOPped now, by pid: the timer that sends SIGCONT, and a promise that settles when it has. */
  private readonly frozen = new Map<number, { timer: NodeJS.Timeout; thawed: Promise<void> }>();
  /** Older workers of rolling deploys still running, by pid: the timer that stops them, and their exit. */
  private readonly olders = new Map<number, { timer: NodeJS.Timeout; exited: Promise<void> }>();
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
      case 'crash-redis':
        await this.server.crashAndRestart(step.downMs);
        this.state.faults[step.kind]++;
        return;
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
    }
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
    let results: PublishResult[];
    try {
      if (many) results = await this.publisher.publishMany(inputs);
      else {
        const [{ event, data, ...options }] = inputs;
        results = [await this.publisher.publish(event, data, options)];
      }
    } catch {
      // Redis is down: the events are not accepted (and not retried); some may be in the log anyway.
      this.state.rejected += events.length;
      return;
    }
    results.forEach((r, i) => this.state.accepted.push({ n: events[i].n, id: r.id, partition: r.partition, offset: r.offset }));
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

/** Whether any partition of `group` still holds a parked line. */
async function hasParkedLines(redis: Redis, keys: EventrailKeys, group: string): Promise<boolean> {
  for (let p = 0; p < keys.partitions; p++) {
    const fields = await redis.hkeys(keys.recovery(group, p));
    if (fields.some((field) => field.startsWith('park:'))) return true;
  }
  return false;
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
  // A worker that was still starting when Redis went down fails its startup (the library refuses to start
  // without Redis unless allowDegradedStart) and the supervisor starts another: expected, noted, not a violation.
  const outages = state.faults['crash-redis'] > 0;
  const failedStartups = supervisor.unexpectedExits.filter((e) => outages && !e.wasReady);
  for (const e of failedStartups) {
    const tail =
      supervisor.children
        .find((c) => c.pid === e.pid)
        ?.lines.slice(-3)
        .join(' / ') ?? '';
    state.skipped.push(`worker ${e.pid} in slot ${e.slot} failed its startup in a run with Redis outages: ${tail.slice(0, 300)}`);
  }
  const unexpectedExits = [...supervisor.unexpectedExits.filter((e) => !failedStartups.includes(e)), ...supervisor.crashes].map(
    (e) => `worker exit not caused by the test: ${JSON.stringify(e)}`,
  );
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
