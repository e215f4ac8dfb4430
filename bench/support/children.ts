import { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { spawnTypeScript } from '../../test/support/child-processes';
import type { Measurement, Size } from './scenario';

/** What a benchmark child process tells its parent. */
export type ChildReport =
  | { type: 'ready' }
  | { type: 'progress'; handled: number; lastAt: number }
  | { type: 'done'; sent: number; cpuMs?: number }
  | { type: 'latency'; count: number; p50: number; p99: number; max: number; cpuMs?: number }
  | { type: 'window-open' }
  | { type: 'window-closed'; cpuMicros: number; elapsedMs: number }
  | { type: 'measured'; measurement: Measurement }
  | { type: 'failed'; message: string };

/**
 * What the parent tells a child. The latency scenario's interleaved rounds
 * also ask a producer to `send` a number of events at its rate, and a
 * consumer to report `progress` once it has `handled` that many in all.
 */
export type ChildCommand =
  | { type: 'start' }
  | { type: 'stop' }
  | { type: 'send'; events: number }
  | { type: 'await'; handled: number }
  | { type: 'run'; prefix: string; size: Size };

/** What a child does on each command it knows: the ones it leaves out are reported as failures. */
export type CommandHandlers = { [K in ChildCommand['type']]?: (command: Extract<ChildCommand, { type: K }>) => Promise<void> };

const CONFIG_ENV = 'BENCH_CHILD_CONFIG';

/**
 * A child process running `bench/processes/<script>.ts` through
 * `node -r @swc-node/register`, talking over the IPC channel.
 * BENCH_CHILD_NODE_ARGS adds node flags (`--cpu-prof`, `--trace-gc`, ...).
 */
export class BenchChild {
  private readonly child: ChildProcess;
  private readonly exited: Promise<void>;
  private readonly listeners = new Set<(report: ChildReport) => void>();
  private exitInfo?: string;

  /** `nodeArgs`: node flags this child needs; BENCH_CHILD_NODE_ARGS adds to them. */
  constructor(script: string, config: object, nodeArgs: string[] = []) {
    nodeArgs = [...nodeArgs, ...(process.env.BENCH_CHILD_NODE_ARGS?.split(' ').filter(Boolean) ?? [])];
    this.child = spawnTypeScript(join(__dirname, '..', 'processes', `${script}.ts`), {
      env: { [CONFIG_ENV]: JSON.stringify(config) },
      nodeArgs,
      output: 'inherit',
    });
    this.exited = new Promise((resolve) =>
      this.child.once('exit', (code, signal) => {
        this.exitInfo = `${script} exited (${signal ?? `code ${code}`})`;
        resolve();
      }),
    );
    this.child.on('message', (report: ChildReport) => {
      for (const listener of this.listeners) listener(report);
    });
  }

  /** The child's process id (its memory is read from /proc by the scaling scenario). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  on(listener: (report: ChildReport) => void): void {
    this.listeners.add(listener);
  }

  send(command: ChildCommand): void {
    if (this.child.connected) this.child.send(command);
  }

  /** The next report of `type`; rejects on a `failed` report, an exit or a timeout. */
  next<T extends ChildReport['type']>(type: T, timeoutMs: number): Promise<Extract<ChildReport, { type: T }>> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => finish(new Error(`no "${type}" from the child within ${timeoutMs} ms`)), timeoutMs);
      const listener = (report: ChildReport): void => {
        if (report.type === type) finish(undefined, report as Extract<ChildReport, { type: T }>);
        else if (report.type === 'failed') finish(new Error(`child failed: ${report.message}`));
      };
      const finish = (error?: Error, report?: Extract<ChildReport, { type: T }>): void => {
        clearTimeout(timer);
        this.listeners.delete(listener);
        if (error) reject(error);
        else resolve(report as Extract<ChildReport, { type: T }>);
      };
      this.listeners.add(listener);
      void this.exited.then(() => finish(new Error(this.exitInfo)));
    });
  }

  /** Asks the child to close its app and exit; kills it after 10 s. */
  async stop(): Promise<void> {
    this.send({ type: 'stop' });
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await this.exited;
    clearTimeout(timer);
  }
}

/** In a child: its configuration, as the parent passed it. */
export function childConfig<T>(): T {
  const text = process.env[CONFIG_ENV];
  if (!text) throw new Error(`${CONFIG_ENV} is not set: this file is started by the benchmark`);
  return JSON.parse(text) as T;
}

/** In a child: reports to the parent. */
export function report(message: ChildReport): void {
  process.send?.(message);
}

/**
 * In a child: runs `main` (which starts what the child needs and registers its
 * commands with `onCommands`), then reports `ready`; a failure is reported as
 * `failed` and exits 1.
 */
export function runChild(main: () => Promise<void>): void {
  main().then(
    () => report({ type: 'ready' }),
    (error: unknown) => {
      report({ type: 'failed', message: failureText(error) });
      process.exit(1);
    },
  );
}

/**
 * In a child: runs `handlers` on the parent's commands, and exits when the
 * parent goes away (it died, or was killed) so no child outlives a run.
 */
export function onCommands(handlers: CommandHandlers): void {
  process.on('disconnect', () => process.exit(1));
  process.on('message', (command: ChildCommand) => {
    const handler = handlers[command.type] as ((command: ChildCommand) => Promise<void>) | undefined;
    const done = handler ? handler(command) : Promise.reject(new Error(`this child does not take "${command.type}" commands`));
    done.catch((error: unknown) => {
      report({ type: 'failed', message: failureText(error) });
      process.exitCode = 1;
    });
  });
}

function failureText(error: unknown): string {
  return (error as Error).stack ?? String(error);
}

/** This process's user plus system CPU time since `start`, in ms. */
export function cpuMs(start: NodeJS.CpuUsage): number {
  const { user, system } = process.cpuUsage(start);
  return (user + system) / 1000;
}
