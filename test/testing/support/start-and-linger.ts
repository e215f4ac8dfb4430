/**
 * Run as `node -r @swc-node/register start-and-linger.ts bad-signal|wait`: starts a server and
 * prints `{ pid }` (and, for bad-signal, what stop('SIGBOGUS') did and whether the server still
 * ran then). `bad-signal` then lets the process end by itself; `wait` keeps it running until it is
 * killed from outside.
 */
import { writeSync } from 'node:fs';
import { startRedisServer } from '../../../lib/testing';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function main(): Promise<void> {
  const server = await startRedisServer();
  if (process.argv[2] === 'wait') {
    writeSync(1, `${JSON.stringify({ pid: server.pid })}\n`);
    setInterval(() => undefined, 60_000);
    return;
  }
  const outcome = await server.stop('SIGBOGUS' as NodeJS.Signals).then(
    () => 'resolved',
    (error: Error) => `${error.name}: ${error.message}`,
  );
  writeSync(1, `${JSON.stringify({ pid: server.pid, outcome, aliveAfterStop: alive(server.pid) })}\n`);
}
void main();
