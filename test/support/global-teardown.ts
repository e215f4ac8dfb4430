import { existsSync, readFileSync, rmSync } from 'node:fs';
import { STATE_FILE } from './global-setup';

export default function globalTeardown(): void {
  if (!existsSync(STATE_FILE)) return;
  const { pid } = JSON.parse(readFileSync(STATE_FILE, 'utf8')) as { pid: number };
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
  rmSync(STATE_FILE, { force: true });
}
