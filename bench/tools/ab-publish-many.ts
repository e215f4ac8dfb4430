// `publishMany` against raw pipelined XADD in one process, alternating, five
// rounds (and `prepare` alone, the validation and encoding): a quick check of
// the publish-batch ratio without the whole benchmark.
//
//   node -r @swc-node/register bench/tools/ab-publish-many.ts
import Redis from 'ioredis';
import { EventrailPublisher, PublishInput } from '../../lib';
import { createEventrailApp } from '../support/eventrail-app';
import { BENCH_EVENT, PAYLOAD, minimalFields } from '../support/payload';
import { startRedisServer } from '../support/redis-server';

type Prepare = (event: string, data: unknown, options: object, now: number) => unknown;

async function main(): Promise<void> {
  const redis = await startRedisServer('none');
  const app = await createEventrailApp({ url: redis.url, prefix: 'p' });
  const publisher = app.get(EventrailPublisher);
  const c = new Redis(redis.url);
  await c.ping();
  const batch: PublishInput[] = Array.from({ length: 1000 }, () => ({ event: BENCH_EVENT, data: PAYLOAD }));
  const N = 100_000;
  const prepare = (publisher as unknown as { prepare: Prepare }).prepare.bind(publisher);
  const time = async (f: () => Promise<unknown>): Promise<number> => {
    const t = performance.now();
    for (let i = 0; i < N; i += 1000) await f();
    return (N / (performance.now() - t)) * 1000;
  };
  for (let r = 0; r < 5; r++) {
    const raw = await time(async () => {
      const p = c.pipeline();
      for (let j = 0; j < 1000; j++) p.xadd('s', '*', ...minimalFields(JSON.stringify(PAYLOAD)));
      await p.exec();
    });
    const er = await time(() => publisher.publishMany(batch));
    const prep = await time(async () => {
      for (const b of batch) prepare(b.event as string, b.data, b, Date.now());
    });
    console.log(`raw ${raw.toFixed(0)} eventrail ${er.toFixed(0)} ratio ${(er / raw).toFixed(2)}  prepare-only ${prep.toFixed(0)}/s`);
    await c.flushall();
  }
  await app.close();
  c.disconnect();
  await redis.stop();
  process.exit(0);
}
void main();
