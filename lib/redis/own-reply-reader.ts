import type { Redis } from 'ioredis';
import { SimpleError } from 'ioredis/built/resp/errors';
import { RespReader } from './resp-reader';

/** What this file uses of an ioredis connection beyond its typings. */
interface Internals {
  stream?: NodeJS.EventEmitter;
  commandQueue: { shift(): QueuedCommand | undefined };
  handleReconnection(error: Error, item: QueuedCommand): void;
  recoverFromFatalError(error: Error, commandError: Error, options: { offlineQueue: boolean }): void;
  emit(event: string, ...args: unknown[]): boolean;
}

interface QueuedCommand {
  command: { name: string; args: unknown[]; resolve(value: unknown): void };
}

/** What gives ioredis's data handler away among a socket's `data` listeners: it feeds its decoder. */
const THEIRS = /decoder\.write\(/;

/**
 * Reads the replies of `connection` with `RespReader` instead of ioredis's
 * decoder, on every socket it opens: on its `connect` (emitted on the tick
 * after ioredis put its data handler on the new socket, before any reply can
 * arrive) the handler's `data` listener is replaced by one that answers the
 * command queue as the handler does for a plain connection (no subscriber,
 * no monitor): a reply resolves the command at the head of the queue, an
 * error reply goes through the connection's `handleReconnection`, bytes that
 * are not RESP through `recoverFromFatalError`. Everything else stays
 * ioredis's: connecting, the handshake's commands, TLS, Sentinel, reconnects,
 * the offline queue, timeouts. For partition workers' read connections only.
 * False (and nothing changed) when the installed ioredis lacks what it uses.
 */
export function readRepliesWithRespReader(connection: Redis): boolean {
  const redis = connection as unknown as Internals;
  if (typeof redis.handleReconnection !== 'function' || typeof redis.recoverFromFatalError !== 'function') return false;
  connection.on('connect', () => replaceDecoder(redis));
  return true;
}

function replaceDecoder(redis: Internals): void {
  const stream = redis.stream;
  if (!stream) return;
  const theirs = stream.listeners('data').find((listener) => THEIRS.test(String(listener)));
  if (!theirs) return;
  const reader = new RespReader(
    (reply) => {
      const item = redis.commandQueue.shift();
      if (!item) {
        redis.emit('error', new Error(`Command queue state error: a reply with no command waiting for it`));
        return;
      }
      if (reply instanceof Error) {
        Object.assign(reply, { command: { name: item.command.name, args: item.command.args } });
        redis.handleReconnection(reply, item);
      } else item.command.resolve(reply);
    },
    { ioredis: true, error: (message) => new (SimpleError as unknown as new (message: string) => Error)(message) },
  );
  stream.removeListener('data', theirs as (...args: unknown[]) => void);
  stream.prependListener('data', (chunk: Buffer) => {
    try {
      reader.write(chunk);
    } catch (error) {
      const fatal = error instanceof Error ? error : new Error(String(error));
      redis.recoverFromFatalError(fatal, fatal, { offlineQueue: false });
    }
  });
}
