import { Command, ReplyError, type Redis } from 'ioredis';
import { RespReader, type RespValue } from './resp-reader';

/** What this file uses of an ioredis connection beyond its typings (checked on each connection, see `READER_INTERNALS`). */
interface Internals {
  stream?: NodeJS.EventEmitter;
  status: string;
  options: { stringNumbers?: boolean };
  condition?: { replyMapping?: string; subscriber?: unknown };
  commandQueue: { shift(): QueuedCommand | undefined; length: number };
  listenerCount(event: string | symbol): number;
  handleReconnection(error: Error, item: QueuedCommand): void;
  recoverFromFatalError(error: Error, commandError: Error, options: { offlineQueue: boolean }): void;
  emit(event: string | symbol, ...args: unknown[]): boolean;
  /** ioredis 6.1's handler of the current socket: its `returnPush` acts on maintenance notifications. */
  dataHandler?: { returnPush?(frame: unknown[]): void };
}

interface QueuedCommand {
  command: { name: string; args: unknown[]; resolve(value: unknown): void };
}

/** The methods of an ioredis connection this file calls beyond its typings. ioredis 6 has them. */
export const READER_INTERNALS = ['handleReconnection', 'recoverFromFatalError'] as const;

/**
 * The class of ioredis's decoder's error replies (`SimpleError`, a `ReplyError`), so a caller that looks at
 * an error's class sees the same one; `ReplyError` where that module is not found.
 */
const ErrorReply = ((): new (message: string) => Error => {
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const errors = require('ioredis/built/resp/errors') as { SimpleError?: new (message: string) => Error };
    if (typeof errors.SimpleError === 'function' && new errors.SimpleError('probe') instanceof ReplyError) return errors.SimpleError;
  } catch {
    // another ioredis layout
  }
  return ReplyError as new (message: string) => Error;
})();

/**
 * The event ioredis 6.1's data handler emits on the connection when a reply empties its command queue (a
 * maintenance handoff waits for it before it moves the connection); undefined in another ioredis layout.
 */
const QUEUE_DRAINED = ((): symbol | undefined => {
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const drained = (require('ioredis/built/DataHandler') as { COMMAND_QUEUE_DRAINED?: unknown }).COMMAND_QUEUE_DRAINED;
    return typeof drained === 'symbol' ? drained : undefined;
  } catch {
    return undefined;
  }
})();

/**
 * ioredis's redaction of the arguments an error reply quotes (the password of an AUTH or HELLO, an ACL
 * rule's, a CONFIG SET's value): `[REDACTED]`, as its handler writes them. Where it is missing (another
 * ioredis), every argument of such a command is.
 */
const redacted = ((): ((name: string, args: unknown[]) => unknown[]) => {
  const redact = (Command as unknown as { redactSensitiveArgs?: (name: string, args: unknown[]) => unknown[] }).redactSensitiveArgs;
  if (typeof redact === 'function') return (name, args) => redact.call(Command, name, args);
  const sensitive = new Set(['auth', 'hello', 'migrate', 'acl', 'config', 'sentinel']);
  return (name, args) => (sensitive.has(name.toLowerCase()) ? args.map(() => '[REDACTED]') : args);
})();

/** What gives ioredis's data handler away among a socket's `data` listeners: it feeds its decoder. */
const THEIRS = /decoder\.write\(/;

/** The sockets whose replies `RespReader` reads (for tests and diagnostics). */
const readByUs = new WeakSet<object>();

/** `EVENTRAIL_REPLY_READER=ioredis` leaves every connection's replies to ioredis's decoder. */
export function ownReplyReaderEnabled(): boolean {
  return process.env.EVENTRAIL_REPLY_READER !== 'ioredis';
}

/** True when `connection`'s current socket has its replies read by `RespReader`. */
export function readsWithRespReader(connection: Redis): boolean {
  const stream = (connection as unknown as Internals).stream;
  return stream !== undefined && readByUs.has(stream);
}

/**
 * Reads the replies of `connection` with `RespReader` instead of ioredis's
 * decoder, on every socket it opens. ioredis's decoder is most of what a
 * partition worker's CPU goes to (docs/performance.md, "the drain"), and a
 * good part of a publisher's; it cannot be swapped per connection: ioredis
 * keeps it in a closure of the socket's `data` listener.
 *
 * On the connection's `connect` (emitted on the tick after ioredis put its
 * data handler on the new socket and wrote the handshake, so before any reply
 * can arrive), that listener is replaced by one that answers the command
 * queue as the handler does for a connection that does not subscribe: a reply resolves
 * the command at the head of the queue, an error reply goes through the
 * connection's `handleReconnection` (so `reconnectOnError` applies), bytes
 * that are not RESP through `recoverFromFatalError` (the socket is closed and
 * its commands fail). Replies have ioredis's types: bulk and simple strings as
 * Buffers, integers as numbers, errors as its decoder's `ReplyError`, RESP3 maps and
 * sets as flat arrays (ioredis's default `legacy` mapping, which its reply
 * transformers then shape per command), push frames dropped but for ioredis's
 * maintenance notifications, which go to its own handler. Everything else
 * stays ioredis's: connecting, the handshake, TLS, Sentinel, reconnects, the
 * offline queue, timeouts.
 *
 * A socket keeps ioredis's decoder when the connection asks for the `resp3`
 * reply mapping, reads numbers as strings, subscribes or monitors (none of which
 * eventrail does on these connections), or when the data handler is not found
 * (another ioredis): then nothing changes. For eventrail's own connection (the
 * one it makes from its `redis` options) and the partition workers' read
 * connections; never for the application's own client.
 */
export function readRepliesWithRespReader(connection: Redis): boolean {
  const redis = connection as unknown as Internals & Record<string, unknown>;
  if (READER_INTERNALS.some((name) => typeof redis[name] !== 'function')) return false;
  connection.on('connect', () => replaceDecoder(redis));
  return true;
}

function replaceDecoder(redis: Internals): void {
  const stream = redis.stream;
  if (!stream || readByUs.has(stream)) return;
  if (
    redis.condition?.replyMapping === 'resp3' ||
    redis.condition?.subscriber ||
    redis.options.stringNumbers ||
    redis.status === 'monitoring'
  )
    return;
  const theirs = stream.listeners('data').filter((listener) => THEIRS.test(String(listener)));
  if (theirs.length !== 1) return;
  const reader = new RespReader((reply) => answer(redis, reply), {
    ioredis: true,
    error: (message) => new ErrorReply(message),
    // RESP3 push frames answer no command. A connection read here subscribes to nothing; what ioredis acts on
    // besides pub/sub is its maintenance notifications, handed to its own handler.
    onPush: (frame) => forwardMaintenance(redis, frame),
  });
  stream.removeListener('data', theirs[0] as (...args: unknown[]) => void);
  // First, as ioredis's was: the reply is read before its socket-timeout checks run.
  stream.prependListener('data', (chunk: Buffer) => {
    try {
      reader.write(chunk);
    } catch (error) {
      const fatal = error instanceof Error ? error : new Error(String(error));
      reader.reset();
      redis.recoverFromFatalError(fatal, fatal, { offlineQueue: false });
    }
  });
  readByUs.add(stream);
}

/**
 * The push frames of ioredis 6.1's maintenance notifications (Redis Enterprise and Redis Cloud announce a
 * migration or failover with them, on RESP3 connections, ioredis's default): ioredis relaxes its timeouts
 * and moves the connection ahead of the migration (`maintNotifications`).
 */
const MAINTENANCE = new Set(['MOVING', 'MIGRATING', 'MIGRATED', 'FAILING_OVER', 'FAILED_OVER']);

/** Hands a maintenance notification to the connection's own ioredis data handler, as its decoder would; drops other pushes. */
function forwardMaintenance(redis: Internals, frame: RespValue[]): void {
  const kind = frame[0];
  const name = Buffer.isBuffer(kind) ? kind.toString('latin1') : typeof kind === 'string' ? kind : undefined;
  if (name === undefined || !MAINTENANCE.has(name)) return;
  try {
    redis.dataHandler?.returnPush?.(frame);
  } catch (error) {
    // As `answer`: what a handler throws must not stop the reading of the replies after it.
    process.nextTick(() => {
      throw error;
    });
  }
}

/**
 * Tells a waiter that the command queue is empty, as ioredis's handler does: once this turn is over and the
 * queue still empty (settling a command may send it again: `reconnectOnError`).
 */
function signalDrained(redis: Internals, drained: symbol): void {
  process.nextTick(() => {
    if (redis.commandQueue.length === 0) redis.emit(drained);
  });
}

/** Settles the command at the head of the queue with `reply`, as ioredis's data handler does. */
function answer(redis: Internals, reply: RespValue): void {
  const item = redis.commandQueue.shift();
  if (!item) {
    redis.emit('error', new Error(`Command queue state error: a reply came with no command waiting for it (${describe(reply)})`));
    return;
  }
  if (QUEUE_DRAINED !== undefined && redis.commandQueue.length === 0 && redis.listenerCount(QUEUE_DRAINED) > 0)
    signalDrained(redis, QUEUE_DRAINED);
  try {
    if (reply instanceof Error) {
      Object.assign(reply, { command: { name: item.command.name, args: redacted(item.command.name, item.command.args) } });
      redis.handleReconnection(reply, item);
    } else item.command.resolve(reply);
  } catch (error) {
    // A caller's code that throws while its command settles must not stop the reading of the replies after it.
    process.nextTick(() => {
      throw error;
    });
  }
}

function describe(reply: RespValue): string {
  if (reply instanceof Error) return `error ${reply.message}`;
  if (Array.isArray(reply)) return `an array of ${reply.length}`;
  return String(reply).slice(0, 80);
}
