import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from 'pg';
import { freePort } from './redis-server';

const run = promisify(execFile);

/** Debian's PostgreSQL 15 (`apt-get install postgresql`); EVENTRAIL_PG_BIN points elsewhere. */
const BIN = process.env.EVENTRAIL_PG_BIN ?? '/usr/lib/postgresql/15/bin';
const NOT_INSTALLED = `initdb is not in ${BIN} (apt-get install postgresql, or set EVENTRAIL_PG_BIN)`;

/** A throwaway PostgreSQL cluster started by this process (the outbox tests' and the benchmark's). */
export interface PostgresServer {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication, loopback only). */
  url: string;
  port: number;
  /** The postmaster's pid. */
  pid: number;
  /** A URL of a fresh, empty database on this server, so a test never sees another's tables. */
  createDatabase(name?: string): Promise<string>;
  /**
   * `pg_ctl restart` with shutdown `mode` (`fast`: backends end their sessions, `immediate`: a crash and
   * crash recovery), on the same port; resolves once the new postmaster answers a query.
   */
  restart(mode: 'fast' | 'immediate'): Promise<void>;
  /** Stops the server (immediate shutdown, by pid), waits for it to exit and removes its files. */
  stop(): Promise<void>;
}

/** Clusters started here and still running: stopped if this process exits first, so none is left behind. */
const running = new Map<number, string>();
process.once('exit', () => {
  for (const [pid, dir] of running) {
    try {
      process.kill(pid, 'SIGQUIT');
    } catch {
      // already gone
    }
    rmSync(dir, { recursive: true, force: true });
  }
});

/** True when initdb is installed where `startPostgres` looks for it. */
export function postgresInstalled(): boolean {
  return existsSync(join(BIN, 'initdb'));
}

/**
 * Creates a cluster in a temp dir (owned by the `postgres` user when this
 * process is root, since PostgreSQL refuses to run as root), starts it on a free
 * loopback port with its socket in that dir, and waits until it answers a query.
 * No fsync: a test cluster never outlives a crash of the machine.
 */
export async function startPostgres(): Promise<PostgresServer> {
  if (!postgresInstalled()) throw new Error(NOT_INSTALLED);
  const dir = mkdtempSync(join(tmpdir(), 'eventrail-pg-'));
  const data = join(dir, 'data');
  const asRoot = process.getuid?.() === 0;
  const owner = asRoot ? ids('postgres') : undefined;
  if (owner) chownSync(dir, owner.uid, owner.gid);
  const as = (command: string, args: string[]): Promise<{ stdout: string; stderr: string }> =>
    asRoot ? run('runuser', ['-u', 'postgres', '--', join(BIN, command), ...args]) : run(join(BIN, command), args);
  try {
    await as('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8', '--locale', 'C']);
    const port = await freePort();
    const settings = [
      `-p ${port}`,
      `-k ${dir}`,
      '-c listen_addresses=127.0.0.1',
      '-c fsync=off',
      '-c full_page_writes=off',
      '-c max_connections=200',
    ];
    await as('pg_ctl', ['-D', data, '-l', join(dir, 'server.log'), '-w', '-t', '60', '-o', settings.join(' '), 'start']);
    const postmasterPid = (): number => Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
    let pid = postmasterPid();
    running.set(pid, dir);
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    await query(url, 'select 1');
    let databases = 0;
    return {
      url,
      port,
      get pid() {
        return pid;
      },
      async createDatabase(name = `t${process.pid}_${++databases}`) {
        await query(url, `create database "${name}"`);
        return `postgres://postgres@127.0.0.1:${port}/${name}`;
      },
      async restart(mode) {
        // The log file again: without -l the new postmaster would hold this call's output pipe open.
        await as('pg_ctl', ['-D', data, '-l', join(dir, 'server.log'), '-w', '-t', '60', '-m', mode, 'restart']);
        running.delete(pid);
        pid = postmasterPid();
        running.set(pid, dir);
        await query(url, 'select 1');
      },
      async stop() {
        if (!running.has(pid)) return;
        try {
          process.kill(pid, 'SIGQUIT');
        } catch {
          // already gone
        }
        await waitUntilGone(pid);
        running.delete(pid);
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    const log = join(dir, 'server.log');
    const tail = existsSync(log) ? readFileSync(log, 'utf8').slice(-2000) : '';
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`PostgreSQL did not start: ${(error as Error).message}\n${tail}`, { cause: error });
  }
}

async function query(url: string, sql: string): Promise<void> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Polls (a signal 0) until `pid` has exited; immediate shutdown takes milliseconds. */
async function waitUntilGone(pid: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    if (Date.now() > deadline) {
      process.kill(pid, 'SIGKILL');
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function ids(user: string): { uid: number; gid: number } {
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((entry) => entry.startsWith(`${user}:`));
  if (!line) throw new Error(`no ${user} user: PostgreSQL will not run as root (apt-get install postgresql creates it)`);
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}
