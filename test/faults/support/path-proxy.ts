import { createServer, Server, Socket } from 'node:net';

/** One client connection and its upstream, with what the cut held back and whether a side closed meanwhile. */
interface Pair {
  client: Socket;
  upstream: Socket;
  held: Array<{ to: Socket; chunk: Buffer }>;
  closedDuringCut: boolean;
}

/**
 * A worker's network path to Redis, as a TCP proxy on loopback that can go
 * silent: while cut it forwards nothing and closes nothing (no FIN, no RST,
 * the sockets stay open and stop reading, as on a link that drops every
 * packet), and a side that closes meanwhile is not told to the other. Healed,
 * it forwards what it held, in order (TCP would retransmit it), then passes
 * on the closes it held back. One per worker slot, so one worker is cut while
 * the others and Redis carry on.
 *
 * Unlike a real cut, the kernel on each side still answers TCP keepalive
 * probes: a cut shorter than eventrail's keepalive (10 s idle, then probes)
 * looks the same either way.
 */
export class PathProxy {
  private readonly server: Server;
  private readonly pairs = new Set<Pair>();
  private cut = false;
  private port = 0;

  private constructor(private readonly target: { host: string; port: number }) {
    this.server = createServer((client) => this.accept(client));
  }

  /** Listens on a free loopback port, forwarding to `redisUrl`'s host and port. */
  static async start(redisUrl: string): Promise<PathProxy> {
    const url = new URL(redisUrl);
    const proxy = new PathProxy({ host: url.hostname, port: Number(url.port) });
    await new Promise<void>((resolve, reject) => {
      proxy.server.once('error', reject);
      proxy.server.listen(0, '127.0.0.1', resolve);
    });
    const address = proxy.server.address();
    if (typeof address !== 'object' || address === null) throw new Error('path proxy: no address after listen');
    proxy.port = address.port;
    return proxy;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get isCut(): boolean {
    return this.cut;
  }

  /** Stops forwarding, on every connection and on those opened meanwhile. */
  silence(): void {
    this.cut = true;
    for (const { client, upstream } of this.pairs) {
      client.pause();
      upstream.pause();
    }
  }

  /** Forwards what was held, then closes what closed meanwhile, and forwards again. */
  heal(): void {
    this.cut = false;
    for (const pair of [...this.pairs]) {
      for (const { to, chunk } of pair.held.splice(0)) if (!to.destroyed) to.write(chunk);
      if (pair.closedDuringCut) this.end(pair);
      else {
        pair.client.resume();
        pair.upstream.resume();
      }
    }
  }

  /**
   * Closes every connection, both ends, and forwards again: what was held
   * (sent during a cut) never arrives, as on a link that died with it in
   * flight. New connections go through.
   */
  drop(): void {
    this.cut = false;
    for (const pair of [...this.pairs]) {
      pair.held.length = 0;
      this.end(pair);
    }
  }

  async close(): Promise<void> {
    for (const pair of this.pairs) this.end(pair);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    const upstream = new Socket();
    const pair: Pair = { client, upstream, held: [], closedDuringCut: false };
    this.pairs.add(pair);
    const forward = (from: Socket, to: Socket): void => {
      from.on('data', (chunk: Buffer) => {
        if (this.cut) pair.held.push({ to, chunk });
        else to.write(chunk);
      });
      const closed = (): void => {
        if (this.cut) pair.closedDuringCut = true;
        else this.end(pair);
      };
      from.on('error', closed);
      from.on('close', closed);
    };
    forward(client, upstream);
    forward(upstream, client);
    upstream.connect(this.target.port, this.target.host);
    if (this.cut) {
      client.pause();
      upstream.pause();
    }
  }

  private end(pair: Pair): void {
    this.pairs.delete(pair);
    pair.client.destroy();
    pair.upstream.destroy();
  }
}
