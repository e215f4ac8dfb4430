import { ChildProcess, spawn } from 'node:child_process';
import { createServer, Socket } from 'node:net';
import { constants, tmpdir } from 'node:os';
import Redis from 'ioredis';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { checkObject, optionalInteger, rejectUnknownKeys } from '../config/option-checks';

/** A `redis-server` started by `startRedisServer`. */
export interface RedisServer {
  url: string;
  port: number;
  pid: number;
  /**
   * Stops the server and waits for it to exit: SIGKILL unless told otherwise;
   * another signal is followed by SIGKILL if the server is still there after 5 s.
   * A signal name Node does not know is refused (`InvalidOptionError`) before anything is sent.
   */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

// Probe clients close at once: ioredis's disconnect() otherwise leaves a 2 s timer behind when the
// socket had already closed (a refused connection), which keeps a test runner from exiting.
const PROBE = { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, disconnectTimeout: 0 } as const;

const NOT_INSTALLED = 'redis-server is not on the PATH (apt-get install redis-server, brew install redis)';

/** Servers started here and still running: SIGKILLed if this process exits first, so none is left behind. */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** A free TCP port on loopback, as the OS hands it out: nothing listens on it (a connection is refused) until someone binds it. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface StartRedisServerOptions {
  /** Port on 127.0.0.1. @default a free port the OS hands out */
  port?: number;
  /** More `redis-server` arguments; they come last, so they win over the defaults (`['--appendonly', 'yes']`, ...). @default [] */
  args?: string[];
}

/**
 * Starts a throwaway `redis-server` on loopback, without persistence, and
 * waits until it answers (for a Jest global setup, a benchmark, a script);
 * fails at once when it cannot start (not installed, a bad argument, the
 * port taken), with what it printed. `redis-server` must be on the PATH. A
 * server still running when this process exits is killed, so none is left
 * behind; inside a Jest test file that hook never runs (the sandbox's
 * `process` is a copy that never emits `exit`), so stop it in `afterAll`.
 */
export async function startRedisServer(options: StartRedisServerOptions = {}): Promise<RedisServer> {
  checkObject('startRedisServer options', options, 'an object like { port: 6390 }');
  rejectUnknownKeys('startRedisServer', options, ['port', 'args']);
  const port = optionalInteger('startRedisServer.port', options.port, 1, 65535);
  const extraArgs = options.args ?? [];
  if (!Array.isArray(extraArgs) || extraArgs.some((arg) => typeof arg !== 'string')) {
    throw new InvalidOptionError('startRedisServer.args', extraArgs, 'an array of strings');
  }
  refuseDaemonize(extraArgs);
  const chosen = port ?? (await freePort());
  // The temp dir as its working directory, where nothing is written without persistence
  // (eventrail's CI finds a server left behind by an interrupted run through its private TMPDIR).
  const dir = tmpdir();
  const args = [
    '--port',
    String(chosen),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
    '--protected-mode',
    'no',
    '--dir',
    dir,
  ];
  // Its own process group: a Ctrl-C in the terminal reaches the test run or the benchmark, which stop it.
  const child = spawn('redis-server', [...args, ...extraArgs], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  child.unref();
  running.add(child);
  const watchdog = watch(child.pid as number);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => {
    running.delete(child);
    // Its server is gone: the watchdog must not kill whatever process gets that pid next.
    watchdog?.kill('SIGKILL');
  });
  let output = '';
  const keep = (chunk: Buffer): void => void (output = (output + chunk.toString()).slice(-2000));
  const pipes = [child.stdout, child.stderr] as Socket[];
  for (const pipe of pipes) pipe.on('data', keep);
  const failed = new Promise<never>((_, reject) => {
    child.once('error', (error: NodeJS.ErrnoException) => reject(error.code === 'ENOENT' ? new Error(NOT_INSTALLED) : error));
    void exited.then(() => reject(new Error(`redis-server on port ${chosen} exited at startup:\n${output}`)));
  });
  failed.catch(() => undefined);

  const url = `redis://127.0.0.1:${chosen}`;
  try {
    await waitUntilServedBy(url, child.pid as number, 10_000, failed);
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  // Nothing reads its output any more: drain it, so the server never blocks on a full pipe, without keeping this process alive.
  for (const pipe of pipes) {
    pipe.off('data', keep);
    pipe.resume();
    pipe.unref();
  }
  return {
    url,
    port: chosen,
    pid: child.pid as number,
    async stop(signal: NodeJS.Signals = 'SIGKILL') {
      if (typeof signal !== 'string' || !Object.hasOwn(constants.signals, signal)) {
        throw new InvalidOptionError('RedisServer.stop(signal)', signal, 'a signal name Node knows, such as SIGTERM or SIGKILL');
      }
      if (child.exitCode !== null || child.signalCode !== null) return;
      // The child was unref'd so that a forgotten server never holds the process open; while
      // stop() waits for its exit, it must, or Node finds nothing to wait for and exits with
      // the promise unsettled (code 13 at a top-level await in ESM).
      child.ref();
      child.kill(signal);
      const timer = signal === 'SIGKILL' ? undefined : setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** `--daemonize yes` would fork the server away at once: it could not be watched, stopped, or killed with this process. */
function refuseDaemonize(args: string[]): void {
  for (let i = 0; i < args.length; i++) {
    if (/^--daemonize$/i.test(args[i]) && args[i + 1]?.toLowerCase() !== 'no') {
      throw new InvalidOptionError(
        'startRedisServer.args',
        args,
        `no '--daemonize ${args[i + 1] ?? ''}': a daemonized server leaves its parent at once, so it could not be stopped or watched`,
      );
    }
  }
}

/**
 * A parent-death watchdog for the server `pid`: a small shell, in its own
 * process group, that waits for its stdin to close and then kills the
 * server. This process holds the other end of that pipe, so the pipe closes
 * however this process ends: a SIGTERM or SIGKILL included, where no 'exit'
 * hook runs (a redis-server cannot be asked to die with its parent, as
 * prctl's PDEATHSIG would). Neither it nor its pipe keeps this process
 * alive. Undefined where no `sh` runs it (then only the 'exit' hook remains).
 */
function watch(pid: number): ChildProcess | undefined {
  try {
    const dog = spawn('sh', ['-c', 'read _; kill -9 "$1" 2>/dev/null', 'eventrail-redis-watchdog', String(pid)], {
      stdio: ['pipe', 'ignore', 'ignore'],
      detached: true,
    });
    dog.on('error', () => undefined);
    dog.stdin?.on('error', () => undefined);
    dog.unref();
    (dog.stdin as Socket | null)?.unref();
    return dog;
  } catch {
    return undefined;
  }
}

/**
 * Waits until the server answering at `url` is process `pid`: on a port that
 * another server holds, that one answers PING while this one is still
 * starting (and then fails to bind, which `failed` reports).
 */
async function waitUntilServedBy(url: string, pid: number, timeoutMs: number, failed: Promise<never>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await waitUntilAnswers(url, Math.max(0, deadline - Date.now()), failed);
    const client = new Redis(url, PROBE);
    client.on('error', () => undefined);
    let info = '';
    try {
      await client.connect();
      info = await client.info('server');
    } catch {
      // gone again: the next round waits for an answer
    } finally {
      client.disconnect();
    }
    if (new RegExp(`^process_id:${pid}\\r?$`, 'm').test(info)) return;
    if (Date.now() > deadline) throw new Error(`another server answers at ${url}, not the redis-server started (pid ${pid})`);
    await Promise.race([new Promise((resolve) => setTimeout(resolve, 50)), failed]);
  }
}

/** Polls PING until the Redis at `url` answers; gives up after `timeoutMs`, or at once when `failed` rejects. */
export async function waitUntilAnswers(url: string, timeoutMs = 10_000, failed?: Promise<never>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new Redis(url, PROBE);
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.ping();
      return;
    } catch (error) {
      if (Date.now() > deadline)
        throw new Error(`redis at ${url} did not answer within ${timeoutMs} ms: ${(error as Error).message}`, { cause: error });
    } finally {
      client.disconnect();
    }
    const pause = new Promise((resolve) => setTimeout(resolve, 50));
    await (failed ? Promise.race([pause, failed]) : pause);
  }
}
