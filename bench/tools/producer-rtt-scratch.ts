import Redis from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventrailPublisher } from '../../lib';
import { createEventrailApp } from '../support/eventrail-app';
import { BENCH_EVENT, hostNow, makePayload, minimalFields } from '../support/payload';
import { startRedisServer } from '../support/redis-server';
import { percentile } from '../support/stats';
async function main(): Promise<void> {
  const redis = await startRedisServer('none');
  const app = await createEventrailApp({ url: redis.url, prefix: 'p' });
  const publisher = app.get(EventrailPublisher);
  const raw = new Redis(redis.url);
  await raw.ping();
  const run = async (send: (p: unknown) => Promise<unknown>): Promise<string> => {
    const rtt: number[] = [];
    const started = performance.now();
    let sent = 0;
    const pending: Promise<unknown>[] = [];
    while (sent < 10_000) {
      const due = Math.min(10_000, Math.floor((performance.now() - started) / 0.5) + 1);
      for (; sent < due; sent++) {
        const t = hostNow();
        pending.push(send(makePayload(t)).then(() => rtt.push(hostNow() - t)));
      }
      await sleep(1);
    }
    await Promise.all(pending);
    return `p50 ${percentile(rtt, 50).toFixed(3)} p99 ${percentile(rtt, 99).toFixed(3)}`;
  };
  for (let r = 0; r < 3; r++) {
    console.log(`raw ${await run((p) => raw.xadd('s', '*', ...minimalFields(JSON.stringify(p))))}  eventrail ${await run((p) => publisher.publish(BENCH_EVENT, p))}`);
  }
  await app.close();
  raw.disconnect();
  await redis.stop();
  process.exit(0);
}
void main();
