import { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { BatchOptions, ConsumerOptions } from '../../lib';
import { killQuietly, spawnTypeScript } from './child-processes';

/** Event type every e2e worker handles; its data is `{ seq }`. */
export const E2E_EVENT = 'e2e.tick';

/** What a worker process is told through its environment (see worker-process.ts). */
export interface WorkerConfig {
  /** Label for failure messages. */
  name: string;
  redisUrl: string;
  prefix: string;
  partitions: number;
  group: string;
  consumer?: ConsumerOptions;
  /** Handler time in ms: a fixed value or a random one in [min, max]. */
  delayMs?: number | readonly [number, number];
  /** Handlers of these seqs block until the parent sends `open`, to hold a worker mid-batch. */
  gateSeqs?: readonly number[];
  /** Handle with a batch handler of these options instead (each message still reported on its own). */
  batch?: BatchOptions;
  /** With `batch`: a batch holding one of these seqs SIGKILLs its worker from inside the handler. */
  killSeqs?: readonly number[];
}

/** One handler call as the worker saw it; times are high-resolution epoch ms (same clock on one host). */
export interface Delivery {
  pid: number;
  id: string;
  key: string | null;
  seq: number;
  partition: number;
  offset: string;
  attempt: number;
  startedAt: number;
}

export interface Handled extends Delivery {
  endedAt: number;
}

export type WorkerMessage =
  | { type: 'ready'; pid: number; workerId: string }
  | ({ type: 'started' } & Delivery)
  | ({ type: 'handled' } & Handled)
  | { type: 'ownership'; partitions: number[] };

export type WorkerCommand = { cmd: 'ownership' } | { cmd: 'open' };

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

const WORKER_FILE = join(__dirname, 'worker-process.ts');
const READY_TIMEOUT_MS = 30_000;

/** A running worker process: its output, its reports and ways to signal it. */
export class WorkerProcess {
  readonly output: string[] = [];
  readonly exited: Promise<Exit>;
  workerId = '';
  private exit?: Exit;
  private readonly ownershipWaiters: Array<(partitions: number[]) => void> = [];
  private readonly readyPromise: Promise<void>;
  private onReady?: () => void;

  constructor(
    readonly config: WorkerConfig,
    private readonly child: ChildProcess,
    private readonly fleet: Fleet,
  ) {
    this.exited = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      }),
    );
    // Whole lines, so a log message is never split where a chunk ends.
    for (const stream of [child.stdout, child.stderr]) {
      if (stream) createInterface({ input: stream }).on('line', (line) => this.output.push(line));
    }
    child.on('message', (message: WorkerMessage) => this.receive(message));
    let timer: NodeJS.Timeout | undefined;
    this.readyPromise = new Promise<void>((resolve, reject) => {
      this.onReady = resolve;
      timer = setTimeout(
        () => reject(new Error(`worker ${config.name} not ready after ${READY_TIMEOUT_MS} ms: ${this.describe()}`)),
        READY_TIMEOUT_MS,
      );
      void this.exited.then(() => reject(new Error(`worker ${config.name} exited before ready: ${this.describe()}`)));
    });
    // Never an unhandled rejection when nobody waits for ready (a worker killed early).
    void this.readyPromise.catch(() => undefined).finally(() => clearTimeout(timer));
  }

  get pid(): number {
    return this.child.pid as number;
  }

  get hasExited(): boolean {
    return this.exit !== undefined;
  }

  /** Resolves once the worker's Nest app is initialised (its consumers have joined the group). */
  ready(): Promise<void> {
    return this.readyPromise;
  }

  signal(signal: NodeJS.Signals): void {
    process.kill(this.pid, signal);
  }

  send(command: WorkerCommand): void {
    this.child.send(command);
  }

  /** Partitions the worker's consumer says it works right now; rejects if the worker is gone. */
  ownership(): Promise<number[]> {
    if (this.exit) return Promise.reject(new Error(`worker ${this.config.name} has exited: ${this.describe()}`));
    const answer = new Promise<number[]>((resolve, reject) => {
      this.ownershipWaiters.push(resolve);
      void this.exited.then(() => reject(new Error(`worker ${this.config.name} exited before answering: ${this.describe()}`)));
    });
    this.send({ cmd: 'ownership' });
    return answer;
  }

  handled(): Handled[] {
    return this.fleet.handled.filter((h) => h.pid === this.pid);
  }

  started(): Delivery[] {
    return this.fleet.started.filter((s) => s.pid === this.pid);
  }

  /** Last lines of output, for failure messages. */
  tail(lines = 30): string {
    return this.output.slice(-lines).join('\n');
  }

  describe(): string {
    return `${this.config.name} pid ${this.pid} exit ${JSON.stringify(this.exit ?? null)}\n${this.tail()}`;
  }

  private receive(message: WorkerMessage): void {
    switch (message.type) {
      case 'ready':
        this.workerId = message.workerId;
        this.onReady?.();
        return;
      case 'started': {
        const { type: _type, ...delivery } = message;
        this.fleet.started.push(delivery);
        return;
      }
      case 'handled': {
        const { type: _type, ...handled } = message;
        this.fleet.handled.push(handled);
        return;
      }
      case 'ownership':
        this.ownershipWaiters.shift()?.(message.partitions);
        return;
    }
  }
}

/** The worker processes of one test, and every report they sent, in arrival order. */
export class Fleet {
  readonly workers: WorkerProcess[] = [];
  readonly started: Delivery[] = [];
  readonly handled: Handled[] = [];

  /** Starts a worker and waits until it is ready. */
  async spawn(config: WorkerConfig): Promise<WorkerProcess> {
    const worker = this.launch(config);
    await worker.ready();
    return worker;
  }

  /** Starts several workers side by side (startup is mostly compile time) and waits until all are ready. */
  async spawnAll(configs: readonly WorkerConfig[]): Promise<WorkerProcess[]> {
    const workers = configs.map((c) => this.launch(c));
    await Promise.all(workers.map((w) => w.ready()));
    return workers;
  }

  /** Event ids handled (finished) at least once, by any worker. */
  handledIds(): Set<string> {
    return new Set(this.handled.map((h) => h.id));
  }

  /** SIGKILLs every worker still running (stopped ones too) and waits for them to exit. */
  async killAll(): Promise<void> {
    const running = this.workers.filter((w) => !w.hasExited);
    for (const w of running) killQuietly(w.pid, 'SIGKILL');
    await Promise.all(running.map((w) => w.exited));
  }

  private launch(config: WorkerConfig): WorkerProcess {
    const child = spawnTypeScript(WORKER_FILE, { env: workerEnv(config) });
    const worker = new WorkerProcess(config, child, this);
    this.workers.push(worker);
    return worker;
  }
}

function workerEnv(config: WorkerConfig): Record<string, string> {
  const delay = config.delayMs ?? 0;
  const [min, max] = typeof delay === 'number' ? [delay, delay] : delay;
  return {
    NO_COLOR: '1',
    EVENTRAIL_REDIS_URL: config.redisUrl,
    EVENTRAIL_PREFIX: config.prefix,
    WORKER_PARTITIONS: String(config.partitions),
    WORKER_GROUP: config.group,
    WORKER_CONSUMER: JSON.stringify(config.consumer ?? {}),
    WORKER_DELAY_MS: `${min}-${max}`,
    WORKER_GATE_SEQS: (config.gateSeqs ?? []).join(','),
    ...(config.batch && { WORKER_BATCH: JSON.stringify(config.batch) }),
    WORKER_KILL_SEQS: (config.killSeqs ?? []).join(','),
  };
}
