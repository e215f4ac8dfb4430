// Allocations per event in the latency scenario's consumer, by function: a raw
// XADD producer process at 2000 events/s, the consumer (eventrail or the raw
// XREAD BLOCK loop) in this process, V8's sampling heap profiler counting
// what the scavenger collected too (LIVE=1: only what is still alive;
// PROMOTED=1: what survived into old space). STACK_OF=<text> also prints the
// call stacks of the functions whose name contains it.
//
//   node [--no-turbo-inlining] -r @swc-node/register bench/tools/alloc-latency.ts eventrail|raw
import { Session } from 'node:inspector/promises';
import Redis from 'ioredis';
import { startRedisServer } from '../support/redis-server';
import { measure } from '../scenarios/latency';

interface Node {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: Node[];
}

async function main(): Promise<void> {
  const consumer = (process.argv[2] ?? 'eventrail') as 'eventrail' | 'raw';
  const redis = await startRedisServer('none');
  const admin = new Redis(redis.url);
  const session = new Session();
  session.connect();
  await measure({ url: redis.url, admin, prefix: 'warm' }, 'raw', 2000, consumer, true);
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 512,
    includeObjectsCollectedByMinorGC: !process.env.LIVE && !process.env.PROMOTED,
    includeObjectsCollectedByMajorGC: !process.env.LIVE,
  } as never);
  const m = await measure({ url: redis.url, admin, prefix: 'run' }, 'raw', 5000, consumer, true);
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: Node } };
  const byFn = new Map<string, number>();
  let total = 0;
  const walk = (n: Node, stack: string[]): void => {
    const loc = `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.replace(/.*\/(node_modules\/|lib\/|bench\/)/, '$1')}:${n.callFrame.lineNumber}`;
    if (n.selfSize) {
      if (process.env.STACK_OF && loc.includes(process.env.STACK_OF)) {
        const key = `STACK ${[...stack.slice(-6), loc].join(' <- ')}`;
        byFn.set(key, (byFn.get(key) ?? 0) + n.selfSize);
      }
      byFn.set(loc, (byFn.get(loc) ?? 0) + n.selfSize);
      total += n.selfSize;
    }
    for (const c of n.children) walk(c, [...stack, loc]);
  };
  walk(profile.head, []);
  console.log(
    `${consumer}: ${m.metrics.p50} / ${m.metrics.p99} ms; sampled ${(total / 1e6).toFixed(1)} MB over ${m.done} events = ${(total / m.done).toFixed(0)} B/event`,
  );
  for (const [fn, size] of [...byFn].sort((a, b) => b[1] - a[1]).slice(0, 40))
    console.log(`${(size / m.done).toFixed(0).padStart(6)} B/ev  ${fn}`);
  admin.disconnect();
  await redis.stop();
  process.exit(0);
}
void main();
