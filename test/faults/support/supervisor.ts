import { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { GroupStats } from '../../../lib';
import { killQuietly, spawnTypeScript } from '../../support/child-processes';
import { ChaosWorkerCommand, ChaosWorkerConfig, ChaosWorkerMessage, chaosWorkerEnv } from './chaos-protocol';

export const WORKER_FILE = join(__dirname, 'chaos-worker.ts');
const TAIL_LINES = 40;

export interface WorkerExit {
  slot: number;
  pid: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  /**
   * - `killed`: SIGKILLed by the test as chaos;
   * - `stopped`: SIGKILLed by the supervisor's final stop;
   * - `crashed`: died of a SIGKILL the test did not send (a handler killed its own process);
   * - `exited`: anything else (failed startup, a bug): never expected.
   */
  cause: 'killed' | 'stopped' | 'crashed' | 'exited';
  /** Whether it had reported ready (its app was up) before it died. */
  wasReady: boolean;
}

/** One incarnation of a worker slot. */
export class ChaosChild {
  readonly lines: string[] = [];
  readonly exited: Promise<WorkerExit>;
  workerId = '';
  ready = false;
  /** The library's counters as the process last reported them. */
  stats: Record<string, GroupStats> = {};
  private exit?: WorkerExit;
  private killedAs?: 'killed' | 'stopped';
  private readonly statsWaiters: Array<() => void> = [];

  constructor(
    readonly slot: number,
    private readonly child: ChildProcess,
    onMessage: (child: ChaosChild, message: ChaosWorkerMessage) => void,
  ) {
    this.exited = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        const cause = this.killedAs ?? (signal === 'SIGKILL' ? 'crashed' : 'exited');
        this.exit = { slot, pid: this.pid, code, signal, cause, wasReady: this.ready };
        resolve(this.exit);
      }),
    );
    for (const stream of [child.stdout, child.stderr]) {
      if (!stream) continue;
      createInterface({ input: stream }).on('line', (line) => {
        this.lines.push(line);
        if (this.lines.length > TAIL_LINES) this.lines.shift();
      });
    }
    child.on('message', (message: ChaosWorkerMessage) => onMessage(this, message));
  }

  get pid(): number {
    return this.child.pid as number;
  }

  get hasExited(): boolean {
    return this.exit !== undefined;
  }

  /** SIGKILLs this process by pid; false when it had already exited. */
  kill(as: 'killed' | 'stopped' = 'killed'): boolean {
    if (this.exit) return false;
    this.killedAs ??= as;
    return killQuietly(this.pid, 'SIGKILL');
  }

  /** Asks for the counters; resolves on the next report, or when the process is gone. */
  freshStats(): Promise<void> {
    const answered = new Promise<void>((resolve) => this.statsWaiters.push(resolve));
    this.send({ cmd: 'stats' });
    return Promise.race([answered, this.exited.then(() => undefined)]);
  }

  /** A stats report arrived. */
  receiveStats(stats: Record<string, GroupStats>): void {
    this.stats = stats;
    for (const resolve of this.statsWaiters.splice(0)) resolve();
  }

  send(command: ChaosWorkerCommand): void {
    if (!this.exit && this.child.connected) this.child.send(command);
  }

  describe(): string {
    return `slot ${this.slot} pid ${this.pid} exit ${JSON.stringify(this.exit ?? null)}\n${this.lines.join('\n')}`;
  }
}

/**
 * Keeps `slots` chaos worker processes running, as a process supervisor
 * would: whenever one exits (killed by the test, or crashed by its own
 * handler), a new one is started in its slot at once. Keeps every exit and
 * the latest library counters each process reported.
 */
export class Supervisor {
  readonly exits: WorkerExit[] = [];
  readonly children: ChaosChild[] = [];
  private readonly current: Array<ChaosChild | undefined>;
  private running = false;
  private readonly settled: Array<Promise<WorkerExit>> = [];

  constructor(
    readonly config: ChaosWorkerConfig,
    readonly slots: number,
    /**
     * Another worker file speaking the same IPC messages (the database schedules' inbox worker), with its
     * own env; `slotEnv`: what differs per slot (the fault schedules' own path to Redis for each slot).
     */
    private readonly worker: { file: string; env?: Record<string, string>; slotEnv?: (slot: number) => Record<string, string> } = {
      file: WORKER_FILE,
    },
  ) {
    this.current = new Array<ChaosChild | undefined>(slots);
  }

  /** Starts every slot. Does not wait for readiness: a worker may crash before it is ever ready. */
  start(): void {
    this.running = true;
    for (let slot = 0; slot < this.slots; slot++) this.launch(slot);
  }

  /** Processes started to replace one that died. */
  get restarts(): number {
    return this.children.length - this.slots;
  }

  /** Exits by a SIGKILL the test did not send: a handler crashed its own process. */
  get crashes(): WorkerExit[] {
    return this.exits.filter((e) => e.cause === 'crashed');
  }

  /** Exits by the test's chaos kills (not the final stop). */
  get kills(): WorkerExit[] {
    return this.exits.filter((e) => e.cause === 'killed');
  }

  /** Exits that were neither a kill nor a crash: a worker that died on its own (failed startup, a bug). */
  get unexpectedExits(): WorkerExit[] {
    return this.exits.filter((e) => e.cause === 'exited');
  }

  /** Workers running now that reported ready. */
  readyChildren(): ChaosChild[] {
    return this.current.filter((c): c is ChaosChild => c !== undefined && c.ready && !c.hasExited);
  }

  /** SIGKILLs a random ready worker; returns it, or undefined when none is ready. */
  killRandom(random: () => number = Math.random): ChaosChild | undefined {
    const ready = this.readyChildren();
    if (ready.length === 0) return undefined;
    const victim = ready[Math.floor(random() * ready.length)];
    return victim.kill() ? victim : undefined;
  }

  /**
   * Library counters summed over every process: the last report of each
   * (a process reports every 200 ms and right before a handler crashes it).
   * A lower bound: what a process counted after its last report is lost with it.
   */
  stats(group: string): GroupStats {
    const sum: GroupStats = { handled: 0, deadLettered: 0, skippedDuplicates: 0 };
    for (const child of this.children) {
      const s = child.stats[group];
      if (!s) continue;
      sum.handled += s.handled;
      sum.deadLettered += s.deadLettered;
      sum.skippedDuplicates += s.skippedDuplicates;
    }
    return sum;
  }

  /**
   * Asks every running worker for its counters and waits for the answers, a
   * worker's exit, or `timeoutMs` (a worker still starting answers late; the
   * counters are a lower bound anyway).
   */
  async refreshStats(timeoutMs = 5_000): Promise<void> {
    const running = this.current.filter((c): c is ChaosChild => c !== undefined && !c.hasExited);
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
    await Promise.race([Promise.all(running.map((child) => child.freshStats())), deadline]);
    clearTimeout(timer);
  }

  /** No more restarts; SIGKILLs every running worker and waits until all have exited. */
  async stop(): Promise<void> {
    this.running = false;
    for (const child of this.current) child?.kill('stopped');
    await Promise.all(this.settled);
  }

  /** Last output of every process that ever ran, for failure messages. */
  describe(): string {
    return this.children.map((c) => c.describe()).join('\n---\n');
  }

  private launch(slot: number): void {
    const env = { ...chaosWorkerEnv(this.config), ...this.worker.env, ...this.worker.slotEnv?.(slot) };
    const spawned = spawnTypeScript(this.worker.file, { env });
    const child = new ChaosChild(slot, spawned, (from, message) => this.receive(from, message));
    this.children.push(child);
    this.current[slot] = child;
    const settled = child.exited.then((exit) => {
      this.exits.push(exit);
      if (this.current[slot] === child) this.current[slot] = undefined;
      if (this.running) this.launch(slot);
      return exit;
    });
    this.settled.push(settled);
  }

  private receive(child: ChaosChild, message: ChaosWorkerMessage): void {
    switch (message.type) {
      case 'ready':
        child.workerId = message.workerId;
        child.ready = true;
        return;
      case 'stats':
        child.receiveStats(message.stats);
        return;
    }
  }
}
