// A CPU profile of the p1 c1 drain alone (100k keyed events, the fill left
// out), in the 4th of 4 rounds, to /tmp/drain.cpuprofile; prints each round's rate.
//
//   node -r @swc-node/register bench/tools/prof-drain.ts [batchSize]
//   node -r @swc-node/register bench/tools/profile-summary.ts /tmp/drain.cpuprofile
import { Session } from 'node:inspector/promises';
import { writeFileSync } from 'node:fs';
import Redis from 'ioredis';
import { Countdown } from '../support/countdown';
import { createEventrailApp, fillLog, startConsumers } from '../support/eventrail-app';
import { startRedisServer } from '../support/redis-server';

async function main(): Promise<void> {
  const batchSize = Number(process.argv[2] ?? 200);
  const redis = await startRedisServer('none');
  const admin = new Redis(redis.url);
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  for (let round = 0; round < 4; round++) {
    const N = 100_000;
    const countdown = new Countdown(N);
    const app = await createEventrailApp({
      url: redis.url,
      prefix: `d${round}`,
      consumer: { concurrency: 1, batchSize },
      handler: async () => countdown.hit(),
    });
    await fillLog(app, N, 1000);
    if (round === 3) await session.post('Profiler.start');
    const started = performance.now();
    await startConsumers(app);
    await countdown.wait(60_000, 'drain');
    console.log(`${((N / (countdown.finishedAt - started)) * 1000).toFixed(0)}/s`);
    if (round === 3) {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync('/tmp/drain.cpuprofile', JSON.stringify(profile));
    }
    await app.close();
    await admin.flushall();
  }
  admin.disconnect();
  await redis.stop();
  process.exit(0);
}
void main();
