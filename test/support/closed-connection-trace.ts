/**
 * Jest `setupFiles` entry, for diagnosis only: an ioredis command failed by a
 * closing connection ("Connection is closed.") carries a stack of the socket's
 * close alone, which says neither which command it was nor who closed the
 * connection. Each such error's stack gets the commands the connection failed
 * with it (queued and unsent, or sent and unanswered) and where the code that
 * closed it (`disconnect()` or `quit()`) was called from. Messages, classes and
 * behaviour are unchanged.
 */
import Redis from 'ioredis';

interface QueueItem {
  command?: { name?: string; args?: unknown[] };
}
interface Flushing {
  status: string;
  options: { port?: number; db?: number };
  offlineQueue?: { toArray?(): QueueItem[] };
  commandQueue?: { toArray?(): QueueItem[] };
  flushQueue(error: Error, options?: unknown): void;
  disconnect(reconnect?: boolean): void;
  quit(...args: unknown[]): Promise<unknown>;
  closedBy?: string;
}

const prototype = Redis.prototype as unknown as Flushing;
const { flushQueue, disconnect, quit } = prototype;
const caller = (): string => (new Error().stack ?? '').split('\n').slice(3, 15).join('\n');
prototype.disconnect = function tracedDisconnect(this: Flushing, reconnect?: boolean): void {
  if (!reconnect) this.closedBy = `disconnect() ${caller()}`;
  disconnect.call(this, reconnect);
};
prototype.quit = function tracedQuit(this: Flushing, ...args: unknown[]): Promise<unknown> {
  this.closedBy = `quit() ${caller()}`;
  return quit.apply(this, args);
};
prototype.flushQueue = function traced(this: Flushing, error: Error, options?: unknown): void {
  const name = (where: string) => (item: QueueItem) =>
    `${where} ${item.command?.name ?? '?'}(${String(item.command?.args?.[0] ?? '').slice(0, 60)})`;
  const failed = [
    ...(this.offlineQueue?.toArray?.() ?? []).map(name('unsent')),
    ...(this.commandQueue?.toArray?.() ?? []).map(name('unanswered')),
  ];
  if (failed.length > 0 && error instanceof Error && error.message === 'Connection is closed.' && typeof error.stack === 'string') {
    error.stack +=
      `\n    [closed-connection-trace] port ${this.options.port} db ${this.options.db ?? 0}, status ${this.status}; failed: ${failed.join(', ')}` +
      `\n    [closed-connection-trace] closed by ${this.closedBy ?? 'the server or a retry limit'}`;
  }
  flushQueue.call(this, error, options);
};
