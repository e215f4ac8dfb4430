import { Cluster, Command, Redis } from 'ioredis';

/** What `LeanCommand` uses of ioredis's `Command` beyond its typings (checked once, at load). */
interface CommandInternals {
  name: string;
  args: unknown[];
  callback?: unknown;
  transformed: boolean;
  isResolved: boolean;
  isSettled: boolean;
  promise: Promise<unknown>;
  resolve: (value: unknown) => unknown;
  reject: (error: unknown) => void;
  stringifyArguments(): void;
  transformReply(value: unknown): unknown;
  _clearTimers(): void;
  leanResolve?: (value: unknown) => void;
  leanReject?: (error: unknown) => void;
  /** A script: sent as EVAL on a socket that has not had it yet, as EVALSHA after (see `toWritable`). */
  leanScript?: { client: Redis | Cluster; lua: string; sha: string };
  /** The socket the script was last written to. */
  leanSocket?: object;
}

/**
 * The scripts each socket has been sent (as EVAL): ioredis's own rule for
 * `defineCommand` scripts. A new socket (a reconnect, a failover) starts
 * empty, so a script's first call on it carries its source, and a server
 * that lost its scripts (a restart) never answers NOSCRIPT there. Answering
 * EVALSHA with NOSCRIPT and sending EVAL after it would let the commands
 * written in between overtake it: an `appendMany` run would land after a
 * later append of the same partition.
 */
const loadedOn = new WeakMap<object, Set<string>>();

type ArgumentTransformers = { _transformer?: { argument?: Record<string, ((args: unknown[]) => unknown[]) | undefined> } };

/**
 * The methods of ioredis's `Command` this file calls or replaces beyond its
 * typings. ioredis 5 and 6 have them; where one is missing, the facade
 * (eventrail-scripts.ts) sends ioredis's own commands instead. The fields it
 * sets (`resolve`, `reject`, `promise`, `isResolved`, `isSettled`,
 * `transformed`, `args`, `name`) are checked by behaviour in
 * test/redis/lean-command.int.spec.ts.
 */
export const LEAN_INTERNALS = ['initPromise', 'stringifyArguments', 'transformReply', '_clearTimers', 'toWritable'] as const;

/** The `LEAN_INTERNALS` the installed ioredis's `Command` lacks (empty: lean commands are in use). */
export function missingLeanInternals(): string[] {
  const prototype = Command.prototype as unknown as Record<string, unknown>;
  return LEAN_INTERNALS.filter((name) => typeof prototype[name] !== 'function');
}

const SUPPORTED = missingLeanInternals().length === 0;

function resolveLean(this: CommandInternals, value: unknown): Promise<unknown> {
  try {
    this._clearTimers();
    this.leanResolve?.(this.transformReply(value));
    this.isResolved = true;
    this.isSettled = true;
  } catch (error) {
    this.reject(error);
  }
  return this.promise;
}

function rejectLean(this: CommandInternals, error: unknown): void {
  const script = this.leanScript;
  if (script && error instanceof Error && error.message.startsWith('NOSCRIPT')) {
    // The server lost its scripts under a live socket (SCRIPT FLUSH): sent again, as EVAL; only then
    // can a command written after this one overtake it (as with ioredis's own scripts).
    this.leanScript = undefined;
    if (this.leanSocket) loadedOn.get(this.leanSocket)?.delete(script.sha);
    this.name = 'eval';
    this.args[0] = script.lua;
    (script.client.sendCommand(this as unknown as Command) as Promise<unknown>).catch(() => undefined); // settles this command's own promise
    return;
  }
  this._clearTimers();
  this.isSettled = true;
  this.leanReject?.(error);
}

/**
 * An ioredis `Command` whose promise is settled through bound functions. ioredis
 * gives every command two closures of its own (`resolve` and `reject`, made in
 * the promise's executor). In a busy process this made each young-generation
 * GC promote what a consumer had read since the one before (1.5–2 MB a
 * scavenge at 2000 events/s, 3–5 ms pauses), where commands without those
 * closures left the heap flat and the pauses at 0.5–0.9 ms (docs/performance.md,
 * "the tail"). Everything else is ioredis's own: argument and reply
 * transformers, timeouts, Cluster routing and redirection. Bound functions,
 * not prototype methods, because ioredis calls a command's `reject` unbound
 * (the Cluster client wraps it).
 */
class LeanCommand extends Command {}

if (SUPPORTED) {
  Object.defineProperty(LeanCommand.prototype, 'initPromise', {
    configurable: true,
    writable: true,
    value: function initPromise(this: CommandInternals): void {
      this.isResolved = false;
      this.isSettled = false;
      const promise = new Promise<unknown>((resolve, reject) => {
        this.leanResolve = resolve;
        this.leanReject = reject;
      });
      if (!this.transformed) {
        this.transformed = true;
        const transform = (Command as unknown as ArgumentTransformers)._transformer?.argument?.[this.name];
        if (transform) this.args = transform(this.args);
        this.stringifyArguments();
      }
      this.resolve = resolveLean.bind(this);
      this.reject = rejectLean.bind(this);
      // No callback is ever given (`sendLean` takes none), so the promise is the command's own.
      this.promise = promise;
    },
  });
}

const writable = Command.prototype.toWritable;
/** A script goes as EVAL the first time on each socket, as EVALSHA after (see `loadedOn`). */
LeanCommand.prototype.toWritable = function toWritable(this: CommandInternals, socket: object) {
  const script = this.leanScript;
  if (script) {
    this.leanSocket = socket;
    let loaded = loadedOn.get(socket);
    if (!loaded) loadedOn.set(socket, (loaded = new Set()));
    if (!loaded.has(script.sha)) {
      loaded.add(script.sha);
      this.name = 'eval';
      this.args[0] = script.lua;
    } else if (this.name === 'eval') {
      this.name = 'evalsha';
      this.args[0] = script.sha;
    }
  }
  return writable.call(this as unknown as Command, socket as never);
};

/**
 * Sends `name args` on `client` as a `LeanCommand`: for commands sent once per
 * batch or per event on the hot path (a worker's XREAD, a publish's XADD).
 * `buffers` leaves the reply's strings as Buffers (ioredis's `...Buffer`
 * methods). The client's `keyPrefix`, if any, applies as with its own methods.
 */
export function sendLean<T>(client: Redis | Cluster, name: string, args: Array<string | Buffer | number>, buffers = false): Promise<T> {
  const keyPrefix = (client.options as { keyPrefix?: string }).keyPrefix;
  const command = new LeanCommand(name, args, { replyEncoding: buffers ? null : 'utf8', keyPrefix });
  return client.sendCommand(command) as Promise<T>;
}

/** A Lua script as `sendLeanScript` runs it. */
export interface LeanScript {
  lua: string;
  /** SHA-1 of `lua`, hex. */
  sha: string;
  /** -1 for a script whose caller gives the number of keys with each call. */
  numberOfKeys: number;
}

/**
 * Runs `script` with `args` (its keys first) in a `LeanCommand`: as EVAL the
 * first time on a socket, as EVALSHA after; if the server lost the script
 * under a live socket (NOSCRIPT after SCRIPT FLUSH), the same command is sent
 * again as EVAL, which also loads it.
 * `numberOfKeys` is the script's own unless it lets the caller say (`-n`).
 */
export function sendLeanScript<T>(
  client: Redis | Cluster,
  script: LeanScript,
  args: Array<string | Buffer | number>,
  buffers = false,
  numberOfKeys = script.numberOfKeys,
): Promise<T> {
  if (numberOfKeys < 0) throw new Error(`sendLeanScript: the caller gives the number of keys of script ${script.sha}`);
  const keyPrefix = (client.options as { keyPrefix?: string }).keyPrefix;
  // Command's constructor flattens its arguments one level: `args` (a run of a publishMany: thousands) is copied there only.
  const command = new LeanCommand('evalsha', [script.sha, numberOfKeys, args], {
    replyEncoding: buffers ? null : 'utf8',
    keyPrefix,
  });
  (command as unknown as CommandInternals).leanScript = { client, lua: script.lua, sha: script.sha };
  return client.sendCommand(command) as Promise<T>;
}

/** For the tests: whether commands sent with `sendLean` are lean here (false on an ioredis without the internals it needs). */
export const leanCommandsSupported = SUPPORTED;
