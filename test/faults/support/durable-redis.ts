import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, RedisServer, startRedisServer } from '../../support/redis-server';

/** Every acknowledged write is on disk before the reply: a SIGKILL loses nothing that was acknowledged. */
const AOF_ALWAYS = ['--appendonly', 'yes', '--appendfsync', 'always'];

/**
 * A redis-server of the test's own, with AOF fsynced on every write, in a
 * temporary directory, on a fixed loopback port, so it can be SIGKILLed and
 * started again where clients reconnect to it.
 */
export class DurableRedis {
  /** Pids of every incarnation, the first one included. */
  readonly pids: number[] = [];
  /**
   * performance.now() just before the newest restart spawned its server: nothing
   * can have been answered by that incarnation before. The promise of
   * `crashAndRestart` settles later (it polls until the server answers, and
   * its caller resumes later still under load), so a client may be served first.
   */
  restartSpawnedAt?: number;

  private constructor(
    readonly port: number,
    readonly dir: string,
    private server: RedisServer,
  ) {
    this.pids.push(server.pid);
  }

  static async start(): Promise<DurableRedis> {
    const dir = mkdtempSync(join(tmpdir(), 'eventrail-chaos-redis-'));
    const port = await freePort();
    const server = await startRedisServer(port, [...AOF_ALWAYS, '--dir', dir]);
    return new DurableRedis(port, dir, server);
  }

  get url(): string {
    return this.server.url;
  }

  get pid(): number {
    return this.server.pid;
  }

  /**
   * SIGKILLs the server by pid, waits for it to exit, keeps it down for
   * `downMs` (the outage clients live through), and starts it again on the
   * same port and directory, where it reloads its AOF. Resolves with how long
   * it was not answering.
   */
  async crashAndRestart(downMs = 0): Promise<number> {
    const killedAt = Date.now();
    await this.server.stop('SIGKILL');
    if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs));
    this.restartSpawnedAt = performance.now();
    this.server = await startRedisServer(this.port, [...AOF_ALWAYS, '--dir', this.dir]);
    this.pids.push(this.server.pid);
    return Date.now() - killedAt;
  }

  /** Kills the server and removes its directory. */
  async destroy(): Promise<void> {
    await this.server.stop('SIGKILL');
    rmSync(this.dir, { recursive: true, force: true });
  }
}
