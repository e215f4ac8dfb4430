import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startRedisServer as startServer, waitUntilAnswers } from '../../test/support/redis-server';

export type Persistence = 'none' | 'aof-always';

/** The Redis a benchmark pass runs against. */
export interface BenchRedis {
  url: string;
  persistence: Persistence | 'external';
  /** True when the benchmark started this server, so it may flush it. */
  owned: boolean;
  /** The server's pid when the benchmark started it (pinned to a core with the rest). */
  pid?: number;
  stop(): Promise<void>;
}

/**
 * Starts a throwaway redis-server on a free loopback port (the tests' own
 * starter): no persistence, or an append-only file fsynced on every write.
 * The AOF goes to a directory of its own in the temp dir, the server's working
 * directory, and is deleted on stop.
 */
export async function startRedisServer(persistence: Persistence): Promise<BenchRedis> {
  const aofDir = `eventrail-bench-aof-${process.pid}-${randomBytes(4).toString('hex')}`;
  const aof = persistence === 'none' ? [] : ['--appendonly', 'yes', '--appendfsync', 'always', ...(await aofLocationArgs(aofDir))];
  const server = await startServer(undefined, aof);
  return {
    url: server.url,
    persistence,
    owned: true,
    pid: server.pid,
    async stop() {
      await server.stop('SIGTERM');
      if (persistence !== 'none') {
        rmSync(join(tmpdir(), aofDir), { recursive: true, force: true });
        rmSync(join(tmpdir(), `${aofDir}.aof`), { force: true });
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
