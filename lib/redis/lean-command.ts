import { Cluster, Command, Redis } from 'ioredis';
import { FIELD } from '../wire/codec';

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
  /** What the command writes instead of its name and arguments (a transaction's parts: see `sendLeanTransaction`). */
  leanWritten?: string;
  /** Its place in a transaction (ioredis's own field for its pipelines: see `sendLeanTransaction`). */
  pipelineIndex?: number;
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

/**
 * The appends sent on a single server's connection (an XADD, an appendMany or
 * appendIndexed script, a transaction's MULTI and EXEC parts; its `QueuedReply`
 * placeholders are known by their class) that are never sent again
 * after a reconnect. ioredis sends every command the closed socket left
 * unanswered again on the new one (`autoResendUnfulfilledCommands`), and an
 * append Redis ran before the connection dropped with its reply would run
 * twice: two copies in the log, each an event of its own (its id is derived
 * from its offset), or a guarded run held back by the guard its first run
 * deleted, reported not appended while it is in the log. Taken out of what
 * ioredis sends again, they reject with `AppendReplyLost`, which callers
 * report as `unknown`: they land at most once. The client's other commands
 * (reads, commits, a producer-dedup script, which answers a second run as a
 * duplicate) are still sent again.
 */
const sentOnce = new WeakSet<object>();
/** Clients whose closes `sentOnce` commands are taken out at (see `sendAppendsOnce`). */
const watchedForResends = new WeakSet<object>();

/** What `sendAppendsOnce` uses of ioredis's client: the commands a closed socket left unanswered, until it reconnects. */
interface ResendInternals {
  prevCommandQueue?: {
    length: number;
    peekAt(index: number): { command?: { reject(error: unknown): void } } | undefined;
    remove(index: number, count: number): unknown;
  } | null;
}

/** An append whose connection closed before Redis answered: it may or may not have run, and is not sent again. */
export class AppendReplyLost extends Error {
  constructor() {
    super('the connection closed before Redis answered the append: it may or may not have been appended, and was not sent again');
    this.name = 'AppendReplyLost';
  }
}

/** Marks `command`, an append about to be sent on `client`, as one never sent again (see `sentOnce`). */
function sendOnce(client: Redis | Cluster, command: object): void {
  sentOnce.add(command);
  sendAppendsOnce(client);
}

/**
 * Makes `client` take the appends sent on it with `once` out of what it sends
 * again after a reconnect (see `sentOnce`). ioredis keeps what a closed
 * socket left unanswered in `prevCommandQueue` before it emits `close`, and
 * sends it when the new socket is ready, after that. Not on a Cluster, whose
 * node connections are its own.
 */
export function sendAppendsOnce(client: Redis | Cluster): void {
  if (watchedForResends.has(client) || (client as { isCluster?: boolean }).isCluster === true) return;
  watchedForResends.add(client);
  client.on('close', () => {
    const queue = (client as unknown as ResendInternals).prevCommandQueue;
    if (!queue) return;
    for (let i = 0; i < queue.length;) {
      const command = queue.peekAt(i)?.command;
      // A transaction's QUEUED placeholders are appends' parts too, not marked one by one (one per event).
      if (!command || !(sentOnce.has(command) || command instanceof QueuedReply)) {
        i++;
        continue;
      }
      queue.remove(i, 1);
      command.reject(new AppendReplyLost());
    }
  });
}

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
      this.leanWritten = undefined;
      this.pipelineIndex = undefined;
      // No callback is ever given (`sendLean` takes none), so the promise is the command's own.
      this.promise = promise;
    },
  });
}

const writable = Command.prototype.toWritable;
/** A script goes as EVAL the first time on each socket, as EVALSHA after (see `loadedOn`). */
LeanCommand.prototype.toWritable = function toWritable(this: CommandInternals, socket: object) {
  if (this.leanWritten !== undefined) return this.leanWritten;
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
export function sendLean<T>(
  client: Redis | Cluster,
  name: string,
  args: Array<string | Buffer | number>,
  buffers = false,
  once = false,
): Promise<T> {
  const keyPrefix = (client.options as { keyPrefix?: string }).keyPrefix;
  const command = new LeanCommand(name, args, { replyEncoding: buffers ? null : 'utf8', keyPrefix });
  if (once) sendOnce(client, command);
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
 * `once`: an append, not sent again after a reconnect (see `sendAppendsOnce`).
 */
export function sendLeanScript<T>(
  client: Redis | Cluster,
  script: LeanScript,
  args: Array<string | Buffer | number>,
  buffers = false,
  numberOfKeys = script.numberOfKeys,
  once = false,
): Promise<T> {
  if (numberOfKeys < 0) throw new Error(`sendLeanScript: the caller gives the number of keys of script ${script.sha}`);
  const keyPrefix = (client.options as { keyPrefix?: string }).keyPrefix;
  // Command's constructor flattens its arguments one level: `args` (a run of a publishMany: thousands) is copied there only.
  const command = new LeanCommand('evalsha', [script.sha, numberOfKeys, args], {
    replyEncoding: buffers ? null : 'utf8',
    keyPrefix,
  });
  (command as unknown as CommandInternals).leanScript = { client, lua: script.lua, sha: script.sha };
  if (once) sendOnce(client, command);
  return client.sendCommand(command) as Promise<T>;
}

/** For the tests: whether commands sent with `sendLean` are lean here (false on an ioredis without the internals it needs). */
export const leanCommandsSupported = SUPPORTED;

/** One append of a transaction: the stream key and the XADD's field arguments. */
export interface TransactionAppend {
  key: string;
  fields: readonly string[];
}

/**
 * What each append of a transaction came to, in order: its offset, or the
 * error Redis answered for it (an error reply: it was not appended). A
 * command other than an append (`addCommand`) has its reply in its place.
 */
export type TransactionOutcome = Array<string | Error>;

/** What `LeanTransaction` uses of ioredis's client beyond its typings. */
interface ClientInternals {
  status: string;
  stream?: { writable?: boolean };
  condition?: { select?: number };
  commandQueue?: { push(item: object): void; peekBack?(): { command?: unknown } | undefined };
  options: { keyPrefix?: unknown; reconnectOnError?: unknown };
}

/** The replies to a transaction's MULTI and to the queueing of each of its commands. */
class TransactionReplies {
  opened: unknown;
  readonly queued: unknown[];
  constructor(count: number) {
    this.queued = new Array<unknown>(count);
  }
}

const SETTLED = Promise.resolve();
const DISCARD = ['DISCARD'];
const NO_ARGUMENTS: never[] = [];

/** An error reply from Redis (as ioredis gives it), not one made in this process (a timeout, a lost connection). */
function isErrorReply(value: unknown): value is Error {
  return value instanceof Error && value.name === 'ReplyError';
}

/** A simple or bulk string reply as text (ioredis gives the replies of a `QueuedReply` as Buffers); else undefined. */
function textOf(reply: unknown): string | undefined {
  if (typeof reply === 'string') return reply;
  return Buffer.isBuffer(reply) ? reply.toString() : undefined;
}

/** An XADD's reply: the entry's stream id. */
const STREAM_ID = /^\d+-\d+$/;

/**
 * The replies of a transaction that come before its EXEC's, taken and
 * recorded, with no promise. Two parts take them: MULTI's (`index` -1: this
 * part writes the transaction's first part, the rest following straight on
 * the socket, or all of it when it waited in ioredis's offline queue; it is
 * never sent again after a close, see `sendAppendsOnce`, since a MULTI sent
 * alone would leave the connection inside a transaction), and one part for
 * all its queued XADDs, put in ioredis's command queue once per XADD (the
 * same object each time), which takes the reply Redis gives each as it
 * queues it (`QUEUED`, or an error reply) in order, its `index` moving on
 * with each. These parts write nothing. A reply from
 * Redis fills the next place; an error made here (a `commandTimeout` that
 * passed, a lost connection) fills none, so a place no reply reached is
 * empty (`asErrorReply` says no reply came). One part per XADD (and one
 * queue entry each) cost about 1.5 µs of client CPU per event in a
 * `publishMany` of 1000 (a CPU profile). Built by `queuedReply` without
 * ioredis's `Command` constructor, which every command of the process runs:
 * a constructor that builds objects of one more class ran slower for all of
 * them (a raw corked XADD in the same process cost 5.9 µs of client CPU
 * instead of 3.6).
 */
class QueuedReply extends Command {}

interface QueuedReplyFields {
  replies: TransactionReplies;
  index: number;
  written: string;
  isSettled: boolean;
  _clearTimers(): void;
}

/** Records a reply from Redis: MULTI's, or the next queued XADD's. */
function record(part: QueuedReplyFields, value: unknown): void {
  if (part.index < 0) part.replies.opened = value;
  else part.replies.queued[part.index++] = value;
}

Object.defineProperty(QueuedReply.prototype, 'resolve', {
  configurable: true,
  writable: true,
  value: function resolve(this: QueuedReplyFields, reply: unknown): void {
    if (this.index < 0) this.isSettled = true;
    // As ioredis gives it: a Buffer ('OK', 'QUEUED', or an XADD's offset where MULTI was refused), read only
    // where it matters (`textOf`).
    record(this, reply);
    if (this.isSettled || this.index >= this.replies.queued.length) this._clearTimers();
  },
});
Object.defineProperty(QueuedReply.prototype, 'reject', {
  configurable: true,
  writable: true,
  value: function reject(this: QueuedReplyFields, error: unknown): void {
    // An error made here (a timeout, a lost connection) takes no place: only Redis's replies come in order.
    if (!isErrorReply(error)) return;
    if (this.index < 0) this.isSettled = true;
    record(this, error);
    if (this.isSettled || this.index >= this.replies.queued.length) this._clearTimers();
  },
});
Object.defineProperty(QueuedReply.prototype, 'toWritable', {
  configurable: true,
  writable: true,
  value: function toWritable(this: QueuedReplyFields): string {
    return this.written;
  },
});

/**
 * A `QueuedReply` with the fields ioredis reads of a command (as its
 * constructor sets them), in one order. No `pipelineIndex`: ioredis drops
 * the rest of a pipeline whose first replies came before its connection
 * closed, and a transaction's parts are never sent again anyway
 * (`sendAppendsOnce` takes each out, whatever came before it).
 */
function queuedReply(replies: TransactionReplies, index: number, name: string, written: string): Command {
  const part = Object.create(QueuedReply.prototype) as Record<string, unknown>;
  part.name = name;
  part.inTransaction = false;
  // No promise to trace.
  part.isTraced = true;
  part.isResolved = false;
  part.isSettled = false;
  part.transformed = true;
  part.replyEncoding = undefined;
  part.protocol = 2;
  part.replyMapping = 'legacy';
  part.errorStack = undefined;
  part.args = NO_ARGUMENTS;
  part.callback = undefined;
  part.promise = SETTLED;
  part.pipelineIndex = undefined;
  part.replies = replies;
  part.index = index;
  part.written = written;
  return part as unknown as Command;
}

/** `$<bytes>\r\n<value>\r\n`: one RESP bulk string. */
function bulk(value: string): string {
  return `$${Buffer.byteLength(value)}\r\n${value}\r\n`;
}

/** Field and event names framed as bulk strings: they come back with nearly every append. */
const framedNames = new Map<string, string>();
/** Most names `framedNames` keeps before it starts afresh. */
const FRAMED_NAMES = 1024;

/** `bulk(name)`, made once and kept. */
function framedName(name: string): string {
  let framed = framedNames.get(name);
  if (framed === undefined) {
    if (framedNames.size >= FRAMED_NAMES) framedNames.clear();
    framed = bulk(name);
    framedNames.set(name, framed);
  }
  return framed;
}

/**
 * Whether `sendLeanTransaction` can send on `client` now: a single server's
 * connection that is ready, without a `keyPrefix` (the transaction is written
 * as it is) or a `reconnectOnError` (which may send one command of it again,
 * alone). A ready connection whose socket no longer takes writes (Redis
 * closed it and ioredis has not noticed yet) takes one too: it waits whole in
 * ioredis's offline queue, its MULTI part holding all of it, and is written
 * on the new connection, so the call stays all or nothing there.
 */
export function leanTransactionsAvailable(client: Redis | Cluster): boolean {
  if (!SUPPORTED || (client as { isCluster?: boolean }).isCluster === true) return false;
  const internals = client as unknown as ClientInternals;
  return (
    multiAnswered.get(client) !== 'refused' &&
    internals.status === 'ready' &&
    typeof internals.commandQueue?.push === 'function' &&
    typeof internals.commandQueue.peekBack === 'function' &&
    !internals.options.keyPrefix &&
    !internals.options.reconnectOnError
  );
}

/** Clients on which Redis answered a transaction's MULTI: OK (streamed transactions may go), or an error reply (none go). */
const multiAnswered = new WeakMap<object, 'ok' | 'refused'>();

/**
 * One transaction of appends: `MULTI`, an `XADD key * ...` per append, and
 * `EXEC`. Redis runs them all or none (a refusal while it queues them, such
 * as OOM over `maxmemory`, discards the transaction), and each costs Redis
 * what a plain XADD does, where a Lua script that appends the same costs it
 * about 1.4 times as much (docs/performance.md).
 *
 * ioredis takes one reply per command it queued, so the transaction's text
 * goes through one command (its MULTI part, which writes all of it when it
 * waited in ioredis's offline queue; once written, no part of it is sent
 * again after a reconnect: see `sendAppendsOnce`), and the queued XADDs'
 * `QUEUED` replies are taken by one `QueuedReply`, which records them; EXEC's array
 * is the outcome. `flush` puts what was added so far on the wire, so Redis
 * queues it while the rest is built; `commit` ends it with EXEC, `discard`
 * with DISCARD, the appends not written yet dropped. All of it must happen in
 * one turn of the event loop: nothing else is written on the connection
 * meanwhile.
 *
 * Should Redis refuse the MULTI itself (an ACL without it, or one changed at
 * run time after a MULTI was answered), each command written runs on its own
 * as it arrives and its own reply says what it came to, so the outcome is
 * still each append's, after a DISCARD too; no transaction goes on that
 * client again.
 */
export class LeanTransaction {
  private readonly replies = new TransactionReplies(0);
  private readonly open = queuedReply(this.replies, -1, 'multi', '') as unknown as QueuedReplyFields;
  /** What was written while the MULTI part waits in ioredis's offline queue (it writes all of it then). */
  private readonly held: string[] = [];
  private pending = '*1\r\n$5\r\nMULTI\r\n';
  private count = 0;
  /** The commands written so far (`flush`): what a DISCARD ends. */
  private flushed = 0;
  private lastKey = '';
  private keyPart = '';
  /** Its MULTI part was written at once (not held in ioredis's offline queue): the rest is written behind it. */
  private direct?: boolean;

  private constructor(private readonly client: Redis | Cluster) {}

  /** A transaction on `client`, or undefined where none can go now (see `leanTransactionsAvailable`). */
  static begin(client: Redis | Cluster): LeanTransaction | undefined {
    return leanTransactionsAvailable(client) ? new LeanTransaction(client) : undefined;
  }

  /**
   * Whether Redis answered a MULTI on `client` before: then a transaction may
   * be flushed while it is built, and discarded if building it fails. (Where
   * MULTI was never answered, a refused MULTI would let the XADDs already sent
   * run on their own; where it was, an ACL changed since may still refuse it,
   * which `discard` answers.)
   */
  static confirmed(client: Redis | Cluster): boolean {
    return multiAnswered.get(client) === 'ok';
  }

  /** Whether anything of it was written (`flush`): then only `commit` or `discard` ends it. */
  get started(): boolean {
    return this.direct !== undefined;
  }

  /** Appends one XADD of `fields` to `key`. */
  add(key: string, fields: readonly string[]): void {
    if (key !== this.lastKey) {
      this.lastKey = key;
      this.keyPart = `${bulk(key)}$1\r\n*\r\n`;
    }
    let text = `*${fields.length + 3}\r\n$4\r\nXADD\r\n${this.keyPart}`;
    // Field names (even places) and the event's name come back with every append: framed once (about 0.15 µs
    // of client CPU an event less in a publishMany of 1000, docs/performance.md).
    for (let i = 0; i < fields.length; i++) text += i % 2 === 0 || fields[i - 1] === FIELD.event ? framedName(fields[i]) : bulk(fields[i]);
    this.pending += text;
    this.count++;
  }

  /**
   * Appends one command other than an XADD (`args`, its name first), such as
   * a mark that commands sent after the transaction check: it runs with the
   * appends or not at all. Its reply takes its place in the outcome (where
   * MULTI was refused, as an Error that quotes it: only offsets stay text).
   */
  addCommand(args: readonly string[]): void {
    let text = `*${args.length}\r\n`;
    for (let i = 0; i < args.length; i++) text += bulk(args[i]);
    this.pending += text;
    this.count++;
  }

  /** Writes what was added since the last flush (the socket's cork, if any, decides when it leaves). */
  flush(): void {
    if (this.pending === '') return;
    const text = this.pending;
    this.pending = '';
    this.flushed = this.count;
    const internals = this.client as unknown as ClientInternals;
    if (this.direct === undefined) {
      this.open.written = text;
      sendOnce(this.client, this.open);
      void this.client.sendCommand(this.open as unknown as Command);
      this.direct = internals.commandQueue?.peekBack?.()?.command === this.open;
      if (!this.direct) this.held.push(text);
    } else if (this.direct) (internals.stream as { write(text: string): void }).write(text);
    else {
      // Held in the offline queue, the MULTI part writes all of it when the queue is sent.
      this.held.push(text);
      this.open.written = this.held.join('');
    }
  }

  /** Ends the transaction with EXEC: answers each append's offset or error, in order. */
  commit(): Promise<TransactionOutcome> {
    const count = this.count;
    const { replies } = this;
    return this.end('exec', '*1\r\n$4\r\nEXEC\r\n').then(
      (reply) => {
        multiAnswered.set(this.client, 'ok');
        if (!Array.isArray(reply) || reply.length !== count) throw new Error(`EXEC answered ${String(reply)} for ${count} appends`);
        return reply.map((one: unknown) => (typeof one === 'string' ? one : asErrorReply(one)));
      },
      (error: unknown) => {
        if (textOf(replies.opened) === 'OK') multiAnswered.set(this.client, 'ok');
        if (isErrorReply(replies.opened)) return this.ranAlone();
        // EXECABORT: refused while queued, nothing appended; the first refusal is the cause (OOM, READONLY, ...).
        const cause = replies.queued.find(isErrorReply);
        if (isErrorReply(error) && error.message.startsWith('EXECABORT') && cause) throw cause;
        throw error;
      },
    );
  }

  /**
   * Ends the transaction with DISCARD, then EXEC: a user whose ACL refuses
   * DISCARD (eventrail's own rules do not grant it) would otherwise stay
   * inside the transaction, every later command of the connection answered
   * QUEUED. Refused, DISCARD marks the transaction failed and the EXEC ends it
   * with EXECABORT, running nothing; after a DISCARD that went through, the
   * EXEC is refused (no MULTI), harmlessly. What was added and not written
   * yet (`flush`) is dropped: never sent.
   *
   * Resolves, once Redis has answered, to undefined when nothing of it was
   * appended (Redis had opened the transaction, or nothing of it was
   * written), or, where Redis refused the MULTI (an ACL changed since
   * `confirmed`), to what each command written came to on its own, in order:
   * an append's offset means it is in the log. Rejects when MULTI's reply
   * never came (the connection dropped): those may or may not have run.
   */
  discard(): Promise<TransactionOutcome | undefined> {
    if (!this.started) return Promise.resolve(undefined);
    this.pending = '';
    const written = (this.count = this.flushed);
    this.addCommand(DISCARD);
    const { replies } = this;
    const ended = (reply: unknown, error?: unknown): TransactionOutcome | undefined => {
      if (isErrorReply(replies.opened)) return this.ranAlone().slice(0, written);
      if (textOf(replies.opened) !== 'OK') {
        // Not an error reply (which means not appended): whether the commands ran is not known.
        if (error !== undefined) throw isErrorReply(error) ? new Error(`no reply to MULTI; EXEC answered ${error.message}`) : error;
      } else multiAnswered.set(this.client, 'ok');
      // The EXEC ran the transaction (a server whose refused DISCARD did not mark it failed): its appends are in.
      if (Array.isArray(reply)) return reply.slice(0, written).map((one: unknown) => (typeof one === 'string' ? one : asErrorReply(one)));
      // DISCARD, its EXECABORT, or the connection's close dropped the queued commands.
      return undefined;
    };
    return this.end('exec', '*1\r\n$4\r\nEXEC\r\n').then(ended, (error: unknown) => ended(undefined, error));
  }

  /**
   * Redis refused MULTI itself: each command written ran, or was refused, on
   * its own, and its own reply says which; one without a reply of its own (the
   * connection dropped) may or may not have run. No transaction goes on the
   * client again.
   */
  private ranAlone(): TransactionOutcome {
    multiAnswered.set(this.client, 'refused');
    return this.replies.queued.map((one) => {
      const text = textOf(one);
      return text !== undefined && STREAM_ID.test(text) ? text : asErrorReply(one);
    });
  }

  /** Writes the last command, and queues a part for each XADD's reply and a command for the last one's. */
  private end(name: string, last: string): Promise<unknown> {
    this.pending += last;
    this.flush();
    const internals = this.client as unknown as ClientInternals;
    const queue = internals.commandQueue as Required<NonNullable<ClientInternals['commandQueue']>>;
    const select = internals.condition?.select;
    this.replies.queued.length = this.count;
    if (this.count > 0) {
      // One part takes every XADD's QUEUED reply in turn (see `QueuedReply`): the same entry, once per XADD.
      const part = queuedReply(this.replies, 0, 'xadd', '');
      const entry = { command: part, stream: undefined, select };
      for (let i = 0; i < this.count; i++) {
        if (this.direct) queue.push(entry);
        else void this.client.sendCommand(part);
      }
    }
    const closing = new LeanCommand(name, [], { replyEncoding: 'utf8' }) as unknown as CommandInternals;
    closing.leanWritten = '';
    sentOnce.add(closing);
    if (!this.direct) return this.client.sendCommand(closing as unknown as Command) as Promise<unknown>;
    queue.push({ command: closing, stream: undefined, select });
    return closing.promise;
  }
}

/** `appends` as one transaction (see `LeanTransaction`); undefined, with nothing sent, where none can go now. */
export function sendLeanTransaction(
  client: Redis | Cluster,
  appends: readonly TransactionAppend[],
): Promise<TransactionOutcome> | undefined {
  if (appends.length === 0) return undefined;
  const transaction = LeanTransaction.begin(client);
  if (!transaction) return undefined;
  for (const { key, fields } of appends) transaction.add(key, fields);
  return transaction.commit();
}

/** An append's error: Redis's reply, or what happened instead (no reply: it may or may not have run). */
function asErrorReply(reply: unknown): Error {
  if (reply instanceof Error) return reply;
  return new Error(reply === undefined ? 'no reply (the connection dropped)' : `unexpected reply ${String(reply)}`);
}
