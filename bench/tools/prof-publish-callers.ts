// A CPU profile of `publish` from 1000 concurrent callers (100k events), in the 4th of 4 rounds, to
// /tmp/publish-callers.cpuprofile (sampled every 50 us); prints each round's rate. With `corked`, the
// raw reference instead: plain XADDs, the socket corked per tick.
//
//   node -r @swc-node/register bench/tools/prof-publish-callers.ts [corked]
//   node -r @swc-node/register bench/tools/profile-summary.ts /tmp/publish-callers.cpuprofile
import { Session } from 'node:inspector/promises';
import { writeFileSync } from 'node:fs';
import Redis from 'ioredis';
import { EventrailPublisher } from '../../lib';
import { createEventrailApp } from '../support/eventrail-app';
import { BENCH_EVENT, PAYLOAD } from '../support/payload';
import { tickCorkedXadd } from '../support/raw-writers';
import { startRedisServer } from '../support/redis-server';

async function main(): Promise<void> {
  const redis = await startRedisServer('none');
  const admin = new Redis(redis.url);
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 50 });
  for (let round = 0; round < 4; round++) {
    const N = 100_000;
    const app = await createEventrailApp({ url: redis.url, prefix: `c${round}` });
    const publisher = app.get(EventrailPublisher);
    const client = new Redis(redis.url);
    await client.ping();
    const corked = tickCorkedXadd(client, `c${round}:stream`);
    const call = process.argv[2] === 'corked' ? corked : () => publisher.publish(BENCH_EVENT, PAYLOAD);
    let issued = 0;
    const caller = async (): Promise<void> => {
      while (issued < N) {
        issued++;
        await call();
      }
    };
    if (round === 3) await session.post('Profiler.start');
    const started = performance.now();
    await Promise.all(Array.from({ length: 1000 }, caller));
    console.log(`${((N / (performance.now() - started)) * 1000).toFixed(0)}/s`);
    if (round === 3) {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync('/tmp/publish-callers.cpuprofile', JSON.stringify(profile));
    }
    client.disconnect();
    await app.close();
    await admin.flushall();
  }
  admin.disconnect();
  await redis.stop();
  process.exit(0);
}
void main();
