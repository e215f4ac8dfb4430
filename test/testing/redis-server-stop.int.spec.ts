import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { killQuietly } from '../support/child-processes';

const ROOT = join(__dirname, '..', '..');
const SCRIPT = join(__dirname, 'support', 'start-then-stop.ts');

interface Outcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs the start-then-stop script in a plain Node process and waits for it to exit by itself; SIGKILLs it after `deadlineMs`. */
function runScript(delayMs: number, deadlineMs: number): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-r', '@swc-node/register', SCRIPT, String(delayMs)], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const killer = setTimeout(() => killQuietly(child.pid, 'SIGKILL'), deadlineMs);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(killer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** The entries of `after` beyond those already in `before`, counted by kind. */
function leftBehind(before: string[], after: string[]): string[] {
  const baseline = [...before];
  return after.filter((kind) => {
    const at = baseline.indexOf(kind);
    if (at === -1) return true;
    baseline.splice(at, 1);
    return false;
  });
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('startRedisServer() then stop()', () => {
  // Includes the moment the start-up probes' connections close, and well after every one of them has.
  it.each([0, 100, 1_000, 3_000])(
    'stop() %i ms after start resolves, and the process then exits by itself with nothing left running',
    async (delayMs) => {
      // Generous for a loaded machine (Node with @swc-node/register takes seconds to start there); the
      // report, not the deadline, catches a timer left for a while, and the deadline one that never ends.
      const outcome = await runScript(delayMs, delayMs + 20_000);
      expect(outcome.stderr).toBe('');
      expect(outcome.signal).toBeNull();
      expect(outcome.code).toBe(0);
      const lines = outcome.stdout.trim().split('\n').filter(Boolean);
      expect(lines).toHaveLength(1);
      const report = JSON.parse(lines[0]) as { stopped: boolean; pid: number; before: string[]; after: string[] };
      expect(report.stopped).toBe(true);
      // Nothing the server's start and stop added is still there (the baseline may hold handles that closed since).
      expect(leftBehind(report.before, report.after)).toEqual([]);
      expect(isRunning(report.pid)).toBe(false);
    },
    60_000,
  );
});
