// Allocations per event of a producer publishing at 2000 events/s (as the
// latency scenario's producer does), by function: eventrail `publish` or raw XADD.
//
//   node [--no-turbo-inlining] -r @swc-node/register bench/tools/alloc-producer.ts eventrail|raw
import { Session } from 'node:inspector/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import Redis from 'ioredis';
import { EventrailPublisher } from '../../lib';
import { createEventrailApp } from '../support/eventrail-app';
import { BENCH_EVENT, hostNow, makePayload, minimalFields } from '../support/payload';
import { startRedisServer } from '../support/redis-server';

interface Node {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: Node[];
}

async function main(): Promise<void> {
  const system = process.argv[2] ?? 'eventrail';
  const redis = await startRedisServer('none');
  const app = await createEventrailApp({ url: redis.url, prefix: 'p' });
  const publisher = app.get(EventrailPublisher);
  const raw = new Redis(redis.url);
  const send =
    system === 'raw'
      ? (p: unknown) => raw.xadd('s', '*', ...minimalFields(JSON.stringify(p)))
      : (p: unknown) => publisher.publish(BENCH_EVENT, p);
  const produce = async (total: number) => {
    const pending: Array<Promise<unknown>> = [];
    const started = performance.now();
    let sent = 0;
    while (sent < total) {
      const due = Math.min(total, Math.floor((performance.now() - started) / 0.5) + 1);
      for (; sent < due; sent++) pending.push(send(makePayload(hostNow())));
      await sleep(1);
    }
    await Promise.all(pending);
  };
  await produce(4000);
  const session = new Session();
  session.connect();
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 512,
    includeObjectsCollectedByMinorGC: true,
    includeObjectsCollectedByMajorGC: true,
  } as never);
  const N = 10000;
  await produce(N);
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: Node } };
  const byFn = new Map<string, number>();
  let total = 0;
  const walk = (n: Node): void => {
    const loc = `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.replace(/.*\/(node_modules\/|lib\/|bench\/)/, '$1')}:${n.callFrame.lineNumber}`;
    if (n.selfSize) {
      byFn.set(loc, (byFn.get(loc) ?? 0) + n.selfSize);
      total += n.selfSize;
    }
    for (const c of n.children) walk(c);
  };
  walk(profile.head);
  console.log(`${system}: ${(total / N).toFixed(0)} B/event`);
  for (const [fn, size] of [...byFn].sort((a, b) => b[1] - a[1]).slice(0, 30))
    console.log(`${(size / N).toFixed(0).padStart(6)} B/ev  ${fn}`);
  await app.close();
  raw.disconnect();
  await redis.stop();
  process.exit(0);
}
void main();
