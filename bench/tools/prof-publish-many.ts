// A CPU profile of `publishMany` alone (1000 events a call, 5 x 100k events):
//
//   node --cpu-prof --cpu-prof-dir=/tmp/prof -r @swc-node/register bench/tools/prof-publish-many.ts
//   node -r @swc-node/register bench/tools/profile-summary.ts /tmp/prof/*.cpuprofile --skip-ms 3000
import { EventrailPublisher, PublishInput } from '../../lib';
import { createEventrailApp } from '../support/eventrail-app';
import { BENCH_EVENT, PAYLOAD } from '../support/payload';
import { startRedisServer } from '../support/redis-server';

async function main(): Promise<void> {
  const redis = await startRedisServer('none');
  const app = await createEventrailApp({ url: redis.url, prefix: 'p' });
  const publisher = app.get(EventrailPublisher);
  const batch: PublishInput[] = Array.from({ length: 1000 }, () => ({ event: BENCH_EVENT, data: PAYLOAD }));
  for (let round = 0; round < 5; round++) {
    const started = performance.now();
    for (let i = 0; i < 100_000; i += 1000) await publisher.publishMany(batch);
    console.log(`${((100_000 / (performance.now() - started)) * 1000).toFixed(0)}/s`);
  }
  await app.close();
  await redis.stop();
  process.exit(0);
}
void main();
