import { existsSync, readFileSync, rmSync } from 'node:fs';
import { killQuietly } from './child-processes';
import { STATE_FILE } from './global-setup';

export default function globalTeardown(): void {
  if (!existsSync(STATE_FILE)) return;
  const { pid } = JSON.parse(readFileSync(STATE_FILE, 'utf8')) as { pid: number };
  killQuietly(pid, 'SIGKILL');
  rmSync(STATE_FILE, { force: true });
}
