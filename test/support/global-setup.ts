import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startRedisServer, waitUntilAnswers } from './redis-server';

export const STATE_FILE = join(tmpdir(), `eventrail-jest-${process.pid}.json`);

/**
 * Starts one redis-server for the whole run unless EVENTRAIL_TEST_REDIS_URL
 * points at one. Tests isolate themselves with their own key prefix.
 */
export default async function globalSetup(): Promise<void> {
  if (process.env.EVENTRAIL_TEST_REDIS_URL) {
    await waitUntilAnswers(process.env.EVENTRAIL_TEST_REDIS_URL, 5_000);
    return;
  }
  const server = await startRedisServer();
  process.env.EVENTRAIL_TEST_REDIS_URL = server.url;
  process.env.EVENTRAIL_TEST_REDIS_PID = String(server.pid);
  writeFileSync(STATE_FILE, JSON.stringify({ pid: server.pid }));
}
