import { ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { InvalidOptionError } from '../../lib';
import { startRedisServer } from '../../lib/testing';
import { killQuietly } from '../support/child-processes';
import { waitFor } from '../support/helpers';

const ROOT = join(__dirname, '..', '..');
const SCRIPT = join(__dirname, 'support', 'start-and-linger.ts');

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Runs the script; resolves with its first JSON line and the process, and with its exit once it ends. */
function runScript(mode: 'bad-signal' | 'wait'): { child: ChildProcess; report: Promise<Record<string, unknown>>; exited: Promise<void> } {
  const child = spawn(process.execPath, ['-r', '@swc-node/register', SCRIPT, mode], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  const report = new Promise<Record<string, unknown>>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const line = out.split('\n').find((l) => l.startsWith('{') && l.endsWith('}'));
      if (line) resolve(JSON.parse(line) as Record<string, unknown>);
    });
    child.once('close', () => reject(new Error(`no report: ${out}`)));
  });
  report.catch(() => undefined);
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  return { child, report, exited };
}

describe('startRedisServer refuses what it cannot keep, and leaves no server behind', () => {
  const pids: number[] = [];
  afterAll(() => pids.forEach((pid) => killQuietly(pid, 'SIGKILL')));

  it('stop() with a signal Node does not know rejects naming it, before anything is killed or held', async () => {
    const run = runScript('bad-signal');
    const report = await run.report;
    pids.push(report.pid as number);
    expect(report).toMatchObject({ outcome: expect.stringMatching(/^InvalidOptionError: .*"SIGBOGUS"/), aliveAfterStop: true });
    // Nothing was ref'd: the process ends by itself, and its exit stops the server.
    const ended = await Promise.race([run.exited.then(() => 'exited'), new Promise((r) => setTimeout(r, 20_000, 'still running').unref())]);
    if (ended !== 'exited') killQuietly(run.child.pid, 'SIGKILL');
    expect(ended).toBe('exited');
    await waitFor(() => !alive(report.pid as number), 'the server to be gone after its parent exited', 10_000);
  }, 60_000);

  it('a SIGTERM to the process that started it does not leave the server running', async () => {
    const run = runScript('wait');
    const { pid } = (await run.report) as { pid: number };
    pids.push(pid);
    expect(alive(pid)).toBe(true);
    run.child.kill('SIGTERM');
    await run.exited;
    await waitFor(() => !alive(pid), `redis-server ${pid} to be gone after its parent was terminated`, 10_000);
  }, 60_000);

  it('refuses --daemonize yes (a daemon leaves at once and could not be watched or stopped), starting nothing', async () => {
    for (const args of [
      ['--daemonize', 'yes'],
      ['--daemonize', 'YES'],
      ['--maxmemory', '10mb', '--daemonize', 'yes'],
    ]) {
      const refused = await startRedisServer({ args }).then(
        (server) => server.stop().then(() => 'started'),
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(InvalidOptionError);
      expect((refused as Error).message).toMatch(/daemonize/);
    }
  }, 30_000);
});
