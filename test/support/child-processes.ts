import { ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');

/** Children started here and still running: SIGKILLed if this process exits first, so a run that dies leaves none behind. */
const alive = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of alive) killQuietly(child.pid, 'SIGKILL');
});

export interface TypeScriptChildOptions {
  /** Added to this process's environment. */
  env?: Record<string, string>;
  /** Node flags before the file (`--cpu-prof`, ...). */
  nodeArgs?: string[];
  /** The child's stdout and stderr: piped to read (the default), or this process's own. */
  output?: 'pipe' | 'inherit';
}

/**
 * Runs a TypeScript file of this repository in a child process, as
 * `node -r @swc-node/register <file>` from the repository root, with an IPC
 * channel: the tests' worker processes and the benchmark's children.
 */
export function spawnTypeScript(file: string, options: TypeScriptChildOptions = {}): ChildProcess {
  const output = options.output ?? 'pipe';
  const child = spawn(process.execPath, [...(options.nodeArgs ?? []), '-r', '@swc-node/register', file], {
    cwd: ROOT,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', output, output, 'ipc'],
  });
  alive.add(child);
  child.once('exit', () => alive.delete(child));
  return child;
}

/** Sends `signal` to `pid`; false when there is no such process any more. */
export function killQuietly(pid: number | undefined, signal: NodeJS.Signals): boolean {
  if (pid === undefined) return false;
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    return false; // already gone
  }
}
