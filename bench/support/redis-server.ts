import { ChildProcess, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Redis from 'ioredis';

export type Persistence = 'none' | 'aof-always';

/** The Redis a benchmark pass runs against. */
export interface BenchRedis {
  url: string;
  persistence: Persistence | 'external';
  /** True when the benchmark started this server, so it may flush it. */
  owned: boolean;
  stop(): Promise<void>;
}

const started = new Set<ChildProcess>();
// Last resort (an unexpected throw, process.exit): never leave a redis-server behind.
process.once('exit', () => {
  for (const child of started) child.kill('SIGKILL');
});

/**
 * Starts a throwaway redis-server on a free loopback port: no persistence, or
 * an append-only file fsynced on every write. Its working directory is the
 * temp dir (.ci/run finds leftovers by it); the AOF goes to a directory of its
 * own there and is deleted on stop.
 */
export async function startRedisServer(persistence: Persistence): Promise<BenchRedis> {
  const port = await freePort();
  const dir = tmpdir();
  const aofDir = `eventrail-bench-aof-${process.pid}-${port}`;
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--dir', dir];
  if (persistence === 'none') args.push('--appendonly', 'no');
  else args.push('--appendonly', 'yes', '--appendfsync', 'always', ...(await aofLocationArgs(aofDir)));
  const child = spawn('redis-server', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  started.add(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const failed = new Promise<never>((_, reject) => {
    child.once('error', (error: NodeJS.ErrnoException) =>
      reject(error.code === 'ENOENT' ? new Error('redis-server is not on the PATH (apt-get install redis-server)') : error),
    );
    void exited.then(() => reject(new Error(`redis-server exited at startup: ${stderr}`)));
  });
  failed.catch(() => undefined);
  const url = `redis://127.0.0.1:${port}`;
  await Promise.race([waitUntilAnswers(url, 10_000), failed]);
  return {
    url,
    persistence,
    owned: true,
    async stop() {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
      started.delete(child);
      if (persistence !== 'none') {
        rmSync(join(dir, aofDir), { recursive: true, force: true });
        rmSync(join(dir, `${aofDir}.aof`), { force: true });
      }
    },
  };
}

/** A Redis given through EVENTRAIL_REDIS_URL, once it answers: never flushed, never stopped. */
export async function externalRedis(url: string): Promise<BenchRedis> {
  await waitUntilAnswers(url, 5_000);
  return { url, persistence: 'external', owned: false, stop: () => Promise.resolve() };
}

/** Redis 7 keeps the AOF in a directory (`appenddirname`); older servers in one file. */
async function aofLocationArgs(name: string): Promise<string[]> {
  const major = Number(/v=(\d+)/.exec(await serverVersionText())?.[1] ?? 0);
  return major >= 7 ? ['--appenddirname', name] : ['--appendfilename', `${name}.aof`];
}

function serverVersionText(): Promise<string> {
  return new Promise((resolve) => {
    const child = spawn('redis-server', ['--version'], { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.once('error', () => resolve(''));
    child.once('exit', () => resolve(out));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function waitUntilAnswers(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.ping();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`redis at ${url} did not answer within ${timeoutMs} ms`, { cause: error });
    } finally {
      client.disconnect();
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
