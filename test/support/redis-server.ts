import { ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import Redis from 'ioredis';

export interface RedisServer {
  url: string;
  port: number;
  pid: number;
  /** Kills the server (SIGKILL unless told otherwise) and waits for it to exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** A free TCP port on loopback, as the OS hands it out. */
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

/** Starts a throwaway `redis-server` on loopback, without persistence, and waits until it answers. */
export async function startRedisServer(port?: number, extraArgs: string[] = []): Promise<RedisServer> {
  const chosen = port ?? (await freePort());
  const child: ChildProcess = spawn(
    'redis-server',
    ['--port', String(chosen), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--protected-mode', 'no', ...extraArgs],
    { stdio: 'ignore', detached: true },
  );
  child.unref();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = `redis://127.0.0.1:${chosen}`;
  await waitUntilAnswers(url, 10_000);
  return {
    url,
    port: chosen,
    pid: child.pid as number,
    async stop(signal: NodeJS.Signals = 'SIGKILL') {
      try {
        process.kill(child.pid as number, signal);
      } catch {
        return;
      }
      await exited;
    },
  };
}

export async function waitUntilAnswers(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.ping();
      return;
    } catch (error) {
      if (Date.now() > deadline)
        throw new Error(`redis-server at ${url} did not answer within ${timeoutMs} ms: ${(error as Error).message}`, { cause: error });
    } finally {
      client.disconnect();
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
