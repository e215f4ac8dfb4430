/**
 * Run as `node -r @swc-node/register test/testing/support/start-then-stop.ts <delayMs>`
 * with no IPC channel: starts a server, waits, stops it, and prints one JSON
 * line. The process must then exit by itself; a handle or timer left behind
 * keeps it alive, and a `stop()` that never settles lets it exit without the
 * line (CommonJS exits 0 there, ESM with code 13).
 */
import { writeSync } from 'node:fs';
import { startRedisServer } from '../../../lib/testing';

// writeSync, not console.log: a stdout stream would be one more handle to account for.
async function main(): Promise<void> {
  const delayMs = Number(process.argv[2]);
  // ioredis's debug logger opens process.stderr, a pipe handle when the parent pipes it; opened
  // here, it is in the baseline either way.
  void process.stderr;
  await loopTurns();
  const before = process.getActiveResourcesInfo();
  const server = await startRedisServer();
  await new Promise((resolve) => setTimeout(resolve, delayMs));
  await server.stop();
  // Handles being closed (the exited child's process handle) are gone after the close phase of
  // this loop turn, which follows the check phase: two setImmediate turns pass it. Whatever still
  // keeps the loop alive after that was left behind. This script's own timers have all fired.
  await loopTurns();
  writeSync(1, `${JSON.stringify({ stopped: true, pid: server.pid, before, after: process.getActiveResourcesInfo() })}\n`);
}

async function loopTurns(): Promise<void> {
  for (let turn = 0; turn < 2; turn++) await new Promise((resolve) => setImmediate(resolve));
}

main().catch((error: unknown) => {
  writeSync(2, `${String((error as Error)?.stack ?? error)}\n`);
  process.exitCode = 1;
});
