import Redis from 'ioredis';
import { startRedisServer } from '../support/redis-server';
async function main() {
  const r = await startRedisServer('none');
  const c = new Redis(r.url);
  await c.ping();
  const json = JSON.stringify({ a: 'x'.repeat(180) });
  const N = 100_000, B = 1000;
  for (let round = 0; round < 4; round++) {
    await c.del('s1', 's2');
    let t = performance.now();
    for (let i = 0; i < N; i += B) { const p = c.pipeline(); for (let j = 0; j < B; j++) p.xadd('s1', '*', 'event', 'e', 'data', json); await p.exec(); }
    const pipe = N / (performance.now() - t) * 1000;
    t = performance.now();
    for (let i = 0; i < N; i += B) {
      const s = (c as any).stream; s.cork();
      const ps = new Array(B);
      for (let j = 0; j < B; j++) ps[j] = c.xadd('s2', '*', 'event', 'e', 'data', json);
      s.uncork();
      await Promise.allSettled(ps);
    }
    const cork = N / (performance.now() - t) * 1000;
    console.log(`pipeline ${pipe.toFixed(0)}/s  corked ${cork.toFixed(0)}/s  ratio ${(cork / pipe).toFixed(2)}`);
  }
  c.disconnect(); await r.stop();
}
main();
