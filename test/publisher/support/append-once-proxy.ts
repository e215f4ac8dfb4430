import { createConnection as connect, createServer, Server, Socket } from 'node:net';

/** Where the RESP reply starting at `from` ends in `buffer`, or -1 while it is incomplete (RESP2 and the RESP3 types eventrail sees). */
export function replyEnd(buffer: Buffer, from: number): number {
  if (from >= buffer.length) return -1;
  const line = buffer.indexOf('\r\n', from);
  if (line < 0) return -1;
  const type = String.fromCharCode(buffer[from]);
  if (type === '+' || type === '-' || type === ':' || type === '_' || type === ',' || type === '#' || type === '(') return line + 2;
  const length = Number(buffer.subarray(from + 1, line).toString());
  if (type === '$' || type === '=' || type === '!')
    return length < 0 ? line + 2 : buffer.length >= line + 2 + length + 2 ? line + 2 + length + 2 : -1;
  const items = type === '%' || type === '|' ? length * 2 : Math.max(length, 0);
  let at = line + 2;
  for (let i = 0; i < items; i++) {
    at = replyEnd(buffer, at);
    if (at < 0) return -1;
  }
  return at;
}

/** One proxied connection's reply accounting: replies still to pass (Infinity: all, -1: losing), bytes of a reply not yet whole. */
interface Passing {
  passing: number;
  pending: Buffer;
}

/**
 * A TCP proxy to Redis that can lose replies (after `loseRepliesAfter(n)`
 * each connection passes its next `n` complete replies and drops every byte
 * after them, while every command still reaches Redis, which runs it), drop
 * every connection (`drop()`), and refuse the next `n` connections it accepts
 * (`refuseNext(n)`: closed at once, before a byte passes), so that a
 * reconnect fails and the client closes again before it is ready.
 *
 * Replies are counted per connection: another client's reconnect handshake
 * through the same proxy (an earlier test's app, after a `drop()`) must not
 * spend the replies a test lets through to the connection it attacks.
 */
export class AppendOnceProxy {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private readonly connections = new Set<Passing>();
  /** What a connection accepted now starts with. */
  private mode = Infinity;
  private latest?: Passing;
  private refusing = 0;
  /** Connections refused so far. */
  refused = 0;
  /** Connections accepted and passed on so far. */
  accepted = 0;
  port = 0;

  private constructor(private readonly target: number) {
    this.server = createServer((client) => this.accept(client));
  }

  static async start(port: number): Promise<AppendOnceProxy> {
    const proxy = new AppendOnceProxy(port);
    await new Promise<void>((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    proxy.port = (proxy.server.address() as { port: number }).port;
    return proxy;
  }

  /** Every open connection, and each one accepted from now on, passes its next `replies` replies and loses the rest. */
  loseRepliesAfter(replies: number): void {
    this.mode = replies;
    for (const connection of this.connections) Object.assign(connection, { passing: replies, pending: Buffer.alloc(0) });
  }

  /** How many replies the connection accepted last may still pass (-1 once it loses them). */
  passingOnLatest(): number {
    return this.latest?.passing ?? this.mode;
  }

  refuseNext(connections: number): void {
    this.refusing = connections;
  }

  drop(): void {
    this.mode = Infinity;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    this.connections.clear();
  }

  async close(): Promise<void> {
    this.drop();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    client.on('error', () => undefined);
    if (this.refusing > 0) {
      this.refusing--;
      this.refused++;
      client.destroy();
      return;
    }
    this.accepted++;
    const upstream = connect(this.target, '127.0.0.1');
    const connection: Passing = { passing: this.mode, pending: Buffer.alloc(0) };
    this.connections.add(connection);
    this.latest = connection;
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => (client.destroy(), upstream.destroy(), this.connections.delete(connection)));
    }
    client.on('data', (chunk: Buffer) => upstream.write(chunk));
    upstream.on('data', (chunk: Buffer) => {
      if (connection.passing === Infinity) {
        client.write(chunk);
        return;
      }
      if (connection.passing < 0) return; // lost
      const pending = Buffer.concat([connection.pending, chunk]);
      let end = 0;
      while (connection.passing > 0) {
        const next = replyEnd(pending, end);
        if (next < 0) break;
        end = next;
        connection.passing--;
      }
      if (end > 0) client.write(pending.subarray(0, end));
      connection.pending = connection.passing > 0 ? pending.subarray(end) : Buffer.alloc(0);
      if (connection.passing === 0) connection.passing = -1; // lose the rest
    });
  }
}
