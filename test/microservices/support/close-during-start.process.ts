/**
 * Run as `node -r @swc-node/register close-during-start.process.ts client|server`: closes an
 * EventrailClient (or EventrailServer) while its start waits for Redis on a port where nothing
 * listens (startupTimeoutMs 15 s), then prints one JSON line at exit: how long the process
 * stayed alive after the close resolved. Nothing else holds the process open.
 */
import { writeSync } from 'node:fs';
import { EventrailClient, EventrailServer } from '../../../lib/microservices';
import { freePort } from '../../../lib/testing/redis-server';

async function main(): Promise<void> {
  const kind = process.argv[2];
  const port = await freePort();
  const common = { redis: `redis://127.0.0.1:${port}`, prefix: 'linger', startupTimeoutMs: 15_000 };
  let closedAt = 0;
  process.on('exit', () => writeSync(1, `${JSON.stringify({ kind, aliveAfterCloseMs: Math.round(performance.now() - closedAt) })}\n`));
  // A few connection attempts in, the start is waiting for Redis.
  const waited = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 50));
  if (kind === 'client') {
    const client = new EventrailClient(common);
    const connecting = client.connect().catch((error: Error) => error.name);
    await waited();
    await client.close();
    closedAt = performance.now();
    await connecting;
  } else {
    const server = new EventrailServer({ ...common, group: 'g' });
    void server.listen(() => undefined);
    await waited();
    await server.close();
    closedAt = performance.now();
  }
}
void main();
