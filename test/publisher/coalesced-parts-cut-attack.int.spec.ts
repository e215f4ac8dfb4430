import Redis from 'ioredis';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RedisUnavailableError } from '../../lib';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';
import { waitFor } from '../support/helpers';
import { AppendOnceProxy } from './support/append-once-proxy';
import { ByteCutProxy, PARTITIONS, Pub, publisherOn, readLog, settle, Settled, violations } from './support/coalesced-parts';

/**
 * Concurrent `publish` calls of one tick go as transactions of up to 128 XADDs (append-coalescer.ts). Written by
 * helper-87, which did not write that change, to break "an append is sent at most once" with several parts of a
 * tick in flight: replies lost around every part boundary, the path cut after a seeded byte, CLIENT KILL, Redis
 * SIGSTOPped then SIGKILLed and restarted from its AOF, timeouts. Each event lands at most once, a call resolves
 * only with its own offset, and the connection's replies stay in step after.
 */
describe('coalesced publish in parts: cuts (attack)', () => {
  let server: RedisServer;
  let admin: Redis;
  const pubs: Pub[] = [];

  beforeAll(async () => {
    server = await startRedisServer();
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    await Promise.all(pubs.map((p) => p.app.close().catch(() => undefined)));
    admin?.disconnect();
    await server?.stop();
  });

  /**
   * After a cut, the connection's replies are in step: a probe reads what it wrote, and 300 publishes
   * each answer the offset that holds them. With `timeouts` (a publisher on an ioredis `commandTimeout`
   * of 150 ms, which a host stall alone can pass), a publish answered `unknown` is not counted as rejected:
   * a reply out of step shows as a violation, not as a timeout.
   */
  async function inStep(p: Pub, prefix: string, tag: string, on: Redis = admin, timeouts = false): Promise<string[]> {
    const bad: string[] = [];
    await waitFor(() => p.client.status === 'ready', 'ready again');
    await p.client.set(`${prefix}-probe`, tag);
    const got = await p.client.get(`${prefix}-probe`);
    if (got !== tag) bad.push(`GET answered ${got}`);
    const outcomes = await Promise.all(
      Array.from({ length: 300 }, (_, n) => settle(p.publisher.publish('e', { n, tag: `${tag}-step` }, { partition: n % PARTITIONS }))),
    );
    const log = await readLog(on, prefix);
    bad.push(...violations(`${tag}-step`, outcomes, log).map((b) => `step: ${b}`));
    const rejected = outcomes.filter((o) => !o.ok && !(timeouts && classify(o) === 'unknown')).map(classify);
    if (rejected.length > 0) bad.push(`step: ${rejected.length} rejected (${[...new Set(rejected)].join(', ')})`);
    const pong = await p.client.ping(`pong-${tag}`);
    if (pong !== `pong-${tag}`) bad.push(`PING answered ${pong}`);
    return bad;
  }

  function classify(o: Settled): string {
    if (o.ok) return 'ok';
    const e = o.error as Error;
    if (e instanceof RedisUnavailableError && /may or may not/.test(e.message)) return 'unknown';
    return `other:${e?.name}:${e?.message?.slice(0, 80)}`;
  }

  it('replies lost after k of them, a tick of 600 (alone + 5 parts): each event once; calls whose EXEC passed resolve, the rest unknown; in step after', async () => {
    const proxy = await AppendOnceProxy.start(server.port);
    const report: string[] = [];
    try {
      // replies: call 0 -> 1; part j -> MULTI + 128 QUEUED + EXEC = 130 (last part 87 + 2)
      const ks = [0, 1, 2, 3, 60, 129, 130, 131, 132, 133, 200, 260, 261, 262, 263, 391, 392, 450, 521, 522, 523, 560, 609, 610, 611];
      let round = 0;
      for (const k of ks) {
        const prefix = `cut-lost-${round++}`;
        const p = await publisherOn(proxy.port, prefix);
        pubs.push(p);
        const tag = `k${k}`;
        proxy.loseRepliesAfter(k);
        const promises = Array.from({ length: 600 }, (_, n) => settle(p.publisher.publish('e', { n, tag }, { key: `key${n % 11}` })));
        await waitFor(async () => (await readLog(admin, prefix)).filter((e) => e.tag === tag).length >= 600, 'Redis appended all 600');
        proxy.drop();
        const outcomes = await Promise.all(promises);
        const log = await readLog(admin, prefix);
        const bad = violations(tag, outcomes, log, { keyOf: (n) => `key${n % 11}` });
        // expected resolved set
        const resolvedBy = (n: number): boolean => {
          if (n === 0) return k >= 1;
          const part = Math.floor((n - 1) / 128);
          const partSize = Math.min(128, 599 - part * 128);
          const end = 1 + part * 130 + partSize + 2; // replies up to its EXEC
          return k >= end;
        };
        outcomes.forEach((o, n) => {
          const c = classify(o);
          const want = resolvedBy(n) ? 'ok' : 'unknown';
          if (c !== want) bad.push(`n=${n} ${c} want ${want}`);
        });
        bad.push(...(await inStep(p, prefix, tag)));
        if (bad.length) report.push(`k=${k}: ${bad.length} problems: ${bad.slice(0, 6).join('; ')}`);
        await p.app.close().catch(() => undefined);
        pubs.splice(pubs.indexOf(p), 1);
      }
    } finally {
      await proxy.close();
    }
    expect(report).toEqual([]);
  });

  it('the path to Redis cut after a seeded number of bytes of a tick of 600 (8 KiB events), replies passing: at most once, resolved ones own offsets, in step', async () => {
    const proxy = await ByteCutProxy.start(server.port);
    const random = seededRandom(909);
    const report: string[] = [];
    try {
      for (let round = 0; round < 20; round++) {
        const prefix = `cut-bytes-${round}`;
        const p = await publisherOn(proxy.port, prefix, {}, { publishTimeoutMs: 3000 });
        pubs.push(p);
        const tag = `b${round}`;
        // about 600 * (8 KiB + ~80) bytes
        const total = 600 * 8300;
        const cutAt = Math.floor(random() * total);
        proxy.cutAfter(cutAt);
        const promises = Array.from({ length: 600 }, (_, n) =>
          settle(p.publisher.publish('e', { n, tag, pad: 'p'.repeat(8000) }, { key: `key${n % 13}` })),
        );
        // let Redis take what got through, then drop
        await new Promise((r) => setTimeout(r, 300));
        proxy.drop();
        const outcomes = await Promise.all(promises);
        const log = await readLog(admin, prefix);
        const bad = violations(tag, outcomes, log, { keyOf: (n) => `key${n % 13}` });
        const kinds = new Map<string, number>();
        for (const o of outcomes) kinds.set(classify(o), (kinds.get(classify(o)) ?? 0) + 1);
        for (const kind of kinds.keys())
          if (kind !== 'ok' && kind !== 'unknown' && !kind.startsWith('other:PublishTimeoutError')) bad.push(`kind ${kind}`);
        // a part is all or nothing in the log (transaction): check by part
        const inLog = new Set(log.filter((e) => e.tag === tag).map((e) => e.n));
        for (let part = 0; part * 128 + 1 < 600; part++) {
          const ns = Array.from({ length: Math.min(128, 599 - part * 128) }, (_, i) => 1 + part * 128 + i);
          const landed = ns.filter((n) => inLog.has(n)).length;
          if (landed !== 0 && landed !== ns.length) bad.push(`part ${part}: ${landed}/${ns.length} landed`);
        }
        bad.push(...(await inStep(p, prefix, tag)));
        if (bad.length)
          report.push(
            `round ${round} cutAt ${cutAt} (forwarded ${proxy.forwardedSinceArm}): ${bad.slice(0, 6).join('; ')} kinds ${JSON.stringify([...kinds])}`,
          );
        await p.app.close().catch(() => undefined);
        pubs.splice(pubs.indexOf(p), 1);
      }
    } finally {
      await proxy.close();
    }
    expect(report).toEqual([]);
  });

  it('CLIENT KILL at seeded moments while parts of ticks of 300-1000 are in flight, 20 rounds', async () => {
    const random = seededRandom(1234);
    const report: string[] = [];
    const prefix = 'cut-kill';
    const seen: string[] = [];
    const p = await publisherOn(server.port, prefix);
    pubs.push(p);
    for (let round = 0; round < 20; round++) {
      await waitFor(() => p.client.status === 'ready', 'ready');
      const id = String(await p.client.client('ID'));
      const tag = `r${round}`;
      const count = 300 + Math.floor(random() * 700);
      const pad = Math.floor(random() * 4000);
      const promises = Array.from({ length: count }, (_, n) =>
        settle(p.publisher.publish('e', { n, tag, pad: 'q'.repeat(pad) }, { key: `key${n % 9}` })),
      );
      const waitMs = random() * 6;
      await new Promise((r) => setTimeout(r, waitMs));
      await admin.call('CLIENT', 'KILL', 'ID', id).catch(() => undefined);
      const outcomes = await Promise.all(promises);
      const log = await readLog(admin, prefix);
      const bad = violations(tag, outcomes, log, { keyOf: (n) => `key${n % 9}` });
      for (const o of outcomes) {
        const c = classify(o);
        if (c !== 'ok' && c !== 'unknown') bad.push(c);
      }
      const ok = outcomes.filter((o) => o.ok).length;
      seen.push(`${round}:${count}:${ok}ok/${log.filter((e) => e.tag === tag).length}landed`);
      if (bad.length) report.push(`round ${round} count ${count}: ${bad.slice(0, 6).join('; ')}`);
    }
    console.log(seen.join(' '));
    const last = await inStep(p, prefix, 'kill-end');
    expect({ report, last }).toEqual({ report: [], last: [] });
  });

  it('CLIENT PAUSE WRITE, a tick of 600, CLIENT KILL, UNPAUSE: all unknown, none landed, in step', async () => {
    const prefix = 'cut-pause';
    const p = await publisherOn(server.port, prefix);
    pubs.push(p);
    const id = String(await p.client.client('ID'));
    await admin.call('CLIENT', 'PAUSE', '20000', 'WRITE');
    let outcomes: Settled[];
    try {
      const promises = Array.from({ length: 600 }, (_, n) => settle(p.publisher.publish('e', { n, tag: 'pz' }, { key: `key${n % 9}` })));
      await waitFor(async () => /flags=\S*b/.test(String(await admin.call('CLIENT', 'LIST', 'ID', id))), 'blocked by the pause');
      await admin.call('CLIENT', 'KILL', 'ID', id);
      outcomes = await Promise.all(promises);
    } finally {
      await admin.call('CLIENT', 'UNPAUSE');
    }
    const log = await readLog(admin, prefix);
    const bad = violations('pz', outcomes, log);
    const kinds = new Map<string, number>();
    for (const o of outcomes) kinds.set(classify(o), (kinds.get(classify(o)) ?? 0) + 1);
    bad.push(...(await inStep(p, prefix, 'pz')));
    expect({ bad, kinds: [...kinds], landed: log.filter((e) => e.tag === 'pz').length }).toEqual({
      bad: [],
      kinds: [['unknown', 600]],
      landed: 0,
    });
  });

  it('Redis SIGSTOPped mid tick then SIGKILLed and restarted (AOF always): at most once, resolved ones durable at their offsets, in step', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'er-attack-'));
    const random = seededRandom(77);
    const report: string[] = [];
    let own = await startRedisServer(undefined, ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir]);
    const port = own.port;
    const on = new Redis(own.url);
    const prefix = 'cut-stop';
    const p = await publisherOn(port, prefix, {}, { publishTimeoutMs: 20_000 });
    try {
      for (let round = 0; round < 5; round++) {
        await waitFor(() => p.client.status === 'ready', 'ready', 30_000);
        const tag = `s${round}`;
        const count = 400 + Math.floor(random() * 600);
        const promises = Array.from({ length: count }, (_, n) =>
          settle(p.publisher.publish('e', { n, tag, pad: 'z'.repeat(Math.floor(random() * 3000)) }, { key: `key${n % 7}` })),
        );
        await new Promise((r) => setTimeout(r, random() * 4));
        process.kill(own.pid, 'SIGSTOP');
        await new Promise((r) => setTimeout(r, 100));
        process.kill(own.pid, 'SIGKILL');
        await waitFor(() => {
          try {
            process.kill(own.pid, 0);
            return false;
          } catch {
            return true;
          }
        }, 'killed');
        own = await startRedisServer(port, ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir]);
        const outcomes = await Promise.all(promises);
        await waitFor(async () => {
          try {
            await on.ping();
            return true;
          } catch {
            return false;
          }
        }, 'admin back');
        const log = await readLog(on, prefix);
        const bad = violations(tag, outcomes, log, { keyOf: (n) => `key${n % 7}` });
        const kinds = new Map<string, number>();
        for (const o of outcomes) kinds.set(classify(o), (kinds.get(classify(o)) ?? 0) + 1);
        for (const kind of kinds.keys()) if (kind !== 'ok' && kind !== 'unknown') bad.push(`kind ${kind}`);
        if (bad.length) report.push(`round ${round} count ${count}: ${bad.slice(0, 6).join('; ')} kinds ${JSON.stringify([...kinds])}`);
        else report.push(`ok round ${round}: ${JSON.stringify([...kinds])} landed ${log.filter((e) => e.tag === tag).length}`);
      }
      const last = await inStep(p, prefix, 'stop-end', on);
      expect({ report: report.filter((r) => !r.startsWith('ok')), last }).toEqual({ report: [], last: [] });
      console.log(report.join('\n'));
    } finally {
      await p.app.close().catch(() => undefined);
      on.disconnect();
      await own.stop();
    }
  });
  it('Redis paused (CLIENT PAUSE ALL) past publishTimeoutMs and past an ioredis commandTimeout while a tick of 900 is in parts: timeouts, each lands once, replies in step after', async () => {
    const report: string[] = [];
    for (const [name, redisOpts, opts] of [
      ['deadline', {}, { publishTimeoutMs: 150 }],
      ['commandTimeout', { commandTimeout: 150 }, { publishTimeoutMs: 20_000 }],
    ] as const) {
      const prefix = `slow-${name}`;
      const p = await publisherOn(server.port, prefix, redisOpts, opts);
      pubs.push(p);
      for (let round = 0; round < 3; round++) {
        const tag = `${name}${round}`;
        await admin.call('CLIENT', 'PAUSE', '700', 'ALL');
        const outcomes = await Promise.all(
          Array.from({ length: 900 }, (_, n) => settle(p.publisher.publish('e', { n, tag }, { key: `key${n % 4}` }))),
        );
        await new Promise((r) => setTimeout(r, 900));
        const log = await readLog(admin, prefix);
        const bad = violations(tag, outcomes, log, { keyOf: (n) => `key${n % 4}` });
        const kinds = new Map<string, number>();
        for (const o of outcomes) {
          const k = o.ok ? 'ok' : `${(o.error as Error).name}:${(o.error as Error).message.slice(0, 50)}`;
          kinds.set(k, (kinds.get(k) ?? 0) + 1);
        }
        const landed = log.filter((e) => e.tag === tag).length;
        bad.push(...(await inStep(p, prefix, tag, admin, name === 'commandTimeout')));
        if (bad.length || landed !== 900)
          report.push(`${tag}: landed ${landed} ${bad.slice(0, 6).join('; ')} kinds ${JSON.stringify([...kinds])}`);
      }
    }
    expect(report).toEqual([]);
  });
});
