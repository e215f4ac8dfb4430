import Redis from 'ioredis';
import { createServer, Server, Socket } from 'node:net';
import { LeanTransaction, sendLeanTransaction, TransactionOutcome } from '../../lib/redis/lean-command';
import { waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';

/**
 * Written by a session that did not write the code: one QueuedReply takes
 * every QUEUED reply of a transaction (lib/redis/lean-command.ts). Cuts the
 * reply stream at exact points (a proxy), on the direct path and on the
 * offline-queue path, with neighbours in the same tick; every outcome is
 * checked against the log.
 */

type Rule = (down: Buffer) => number | undefined;

class Pair {
  held: Buffer[] = [];
  rule?: Rule;
  armed = false;
  constructor(
    readonly client: Socket,
    readonly upstream: Socket,
  ) {}
  destroy(): void {
    this.client.destroy();
    this.upstream.destroy();
  }
}

class Proxy {
  readonly pairs = new Set<Pair>();
  port = 0;
  nextRule?: Rule;
  private constructor(
    private readonly server: Server,
    private readonly target: number,
  ) {}
  static async start(target: number): Promise<Proxy> {
    const proxy: Proxy = new Proxy(
      createServer((c) => proxy.accept(c)),
      target,
    );
    await new Promise<void>((r) => proxy.server.listen(0, '127.0.0.1', r));
    proxy.port = (proxy.server.address() as { port: number }).port;
    return proxy;
  }
  pairOf(redis: Redis): Pair {
    const localPort = (redis as unknown as { stream: Socket }).stream.localPort;
    const pair = [...this.pairs].find((p) => p.client.remotePort === localPort);
    if (!pair) throw new Error('no pair');
    return pair;
  }
  private accept(client: Socket): void {
    const upstream = new Socket();
    const pair = new Pair(client, upstream);
    if (this.nextRule) {
      pair.rule = this.nextRule;
      this.nextRule = undefined;
    }
    this.pairs.add(pair);
    client.on('data', (chunk: Buffer) => {
      if (pair.rule && chunk.includes('*1\r\n$5\r\nMULTI\r\n')) pair.armed = true;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!pair.rule || !pair.armed) return void client.write(chunk);
      pair.held.push(chunk);
      const all = Buffer.concat(pair.held);
      const cut = pair.rule(all);
      if (cut === undefined) return;
      pair.rule = undefined;
      client.write(all.subarray(0, cut), () => setTimeout(() => pair.destroy(), 5));
    });
    const gone = (): void => {
      this.pairs.delete(pair);
      pair.destroy();
    };
    for (const s of [client, upstream]) {
      s.on('error', gone);
      s.on('close', gone);
    }
    upstream.connect(this.target, '127.0.0.1');
  }
  async close(): Promise<void> {
    for (const p of this.pairs) p.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

function positions(buf: Buffer, needle: string): number[] {
  const out: number[] = [];
  let at = buf.indexOf(needle);
  while (at >= 0) {
    out.push(at + needle.length);
    at = buf.indexOf(needle, at + 1);
  }
  return out;
}

describe('transaction replies (one QueuedReply for every QUEUED reply), attacked by a session that did not write it', () => {
  let server: RedisServer;
  let admin: Redis;
  let proxy: Proxy;
  const clients: Redis[] = [];

  beforeAll(async () => {
    server = await startRedisServer();
    admin = new Redis(server.url);
    proxy = await Proxy.start(server.port);
  });
  afterAll(async () => {
    for (const c of clients) c.disconnect();
    await proxy?.close();
    admin?.disconnect();
    await server?.stop();
  });

  async function clientOf(options: Record<string, unknown> = {}, port = proxy.port): Promise<Redis> {
    const c = new Redis({ host: '127.0.0.1', port, retryStrategy: () => 20, ...options });
    clients.push(c);
    await waitFor(() => c.status === 'ready', 'ready');
    return c;
  }

  /**
   * Redis has handled all a cut connection sent it: only the live connections are left (the admin's and
   * one per ready client), so nothing of the old one can still land before the log is read.
   */
  async function oldConnectionsGone(): Promise<void> {
    await waitFor(async () => {
      const match = /^connected_clients:(\d+)/m.exec(await admin.info('clients'));
      return Number(match?.[1]) === 1 + clients.filter((c) => c.status === 'ready').length;
    }, 'the cut connections closed on the server');
  }

  /** The connection is in step after a cut: neighbours answered as their own, and a new transaction lands whole. Answers violations. */
  async function inStep(client: Redis, key: string, label: string): Promise<string[]> {
    const step = await Promise.all([
      client.get('atk:before'),
      client.echo('s1'),
      sendLeanTransaction(client, appendsOf(`${key}:s`, 's', 3)),
      client.echo('s2'),
    ]);
    const wrong: string[] = [];
    if (step[0] !== 'before-value' || step[1] !== 's1' || step[3] !== 's2') wrong.push(`${label}: out of step ${JSON.stringify(step)}`);
    wrong.push(...(await check(`${key}:s`, 's', 3, step[2] as TransactionOutcome)).map((w) => `${label}: step ${w}`));
    return wrong;
  }

  async function logOf(key: string): Promise<Array<[string, string]>> {
    const entries = await admin.xrange(key, '-', '+');
    return entries.map(([id, fields]) => [id, fields[1]]);
  }

  /** Outcome of a transaction checked against XRANGE: answers a list of violations. */
  async function check(key: string, tag: string, n: number, outcome: TransactionOutcome | Error): Promise<string[]> {
    const log = (await logOf(key)).filter(([, v]) => v.startsWith(`${tag}/`));
    const wrong: string[] = [];
    if (log.length !== 0 && log.length !== n) wrong.push(`${tag}: ${log.length} of ${n} in the log`);
    const seen = new Set(log.map(([, v]) => v));
    if (seen.size !== log.length) wrong.push(`${tag}: duplicates`);
    if (log.map(([, v]) => v).join() !== (log.length ? Array.from({ length: n }, (_, i) => `${tag}/${i}`).join() : ''))
      wrong.push(`${tag}: order ${log.slice(0, 5).map(([, v]) => v)}`);
    if (Array.isArray(outcome)) {
      outcome.forEach((o, i) => {
        if (typeof o === 'string') {
          const at = log.find(([id]) => id === o);
          if (at?.[1] !== `${tag}/${i}`) wrong.push(`${tag}/${i}: answered ${o}, log has ${at?.[1]}`);
        } else if (o.name === 'ReplyError' && log.length > 0) wrong.push(`${tag}/${i}: refused (${o.message}) but in the log`);
      });
    } else if (outcome.name === 'ReplyError' && log.length > 0) wrong.push(`${tag}: rejected ${outcome.message} but in the log`);
    return wrong;
  }

  function appendsOf(key: string, tag: string, n: number): Array<{ key: string; fields: string[] }> {
    return Array.from({ length: n }, (_, i) => ({ key, fields: ['v', `${tag}/${i}`] }));
  }

  const cuts: Array<[string, (n: number) => Rule]> = [
    // Replies held until EXEC's array and the marker PING after it are in; then only a prefix reaches the client.
    ['after MULTI OK', () => (b) => (b.includes('$6\r\nmarker\r\n') ? positions(b, '+OK\r\n')[0] : undefined)],
    ['after first QUEUED', () => (b) => (b.includes('$6\r\nmarker\r\n') ? positions(b, '+QUEUED\r\n')[0] : undefined)],
    [
      'halfway through QUEUED',
      (n) => (b) => (b.includes('$6\r\nmarker\r\n') ? positions(b, '+QUEUED\r\n')[Math.floor((n - 1) / 2)] : undefined),
    ],
    ['right before EXEC reply', (n) => (b) => (b.includes('$6\r\nmarker\r\n') ? positions(b, '+QUEUED\r\n')[n - 1] : undefined)],
    ['mid EXEC reply', (n) => (b) => (b.includes('$6\r\nmarker\r\n') ? positions(b, '+QUEUED\r\n')[n - 1] + 6 : undefined)],
    ['after EXEC reply, before GET after', () => (b) => (b.includes('$6\r\nmarker\r\n') ? b.indexOf('$6\r\nafter1') : undefined)],
  ];

  for (const path of ['direct', 'offline'] as const) {
    for (const size of [1, 2, 129, 128, 5000]) {
      it(`${path}: replies cut at each point, size ${size}: outcomes match the log, neighbours get their own replies, nothing sent twice`, async () => {
        const client = await clientOf();
        await admin.set('atk:before', 'before-value');
        // A transaction answered first (MULTI confirmed on this client).
        await sendLeanTransaction(client, appendsOf('atk:warm', 'warm', 2));
        const wrong: string[] = [];
        for (const [c, [name, rule]] of cuts.entries()) {
          await waitFor(() => client.status === 'ready', 'ready');
          const key = `atk:${path}:${size}:${c}`;
          const tag = `t${c}`;
          if (path === 'direct') proxy.pairOf(client).rule = rule(size);
          else {
            proxy.nextRule = rule(size);
            (client as unknown as { stream: Socket }).stream.end();
            expect(client.status).toBe('ready');
          }
          const before = client.get('atk:before');
          const tx = sendLeanTransaction(client, appendsOf(key, tag, size));
          expect(tx).toBeDefined();
          const after1 = client.echo('after1');
          const tx2 = sendLeanTransaction(client, appendsOf(key + ':2', tag, size));
          const marker = client.ping('marker');
          const got = await Promise.all([
            before.catch((e: Error) => e),
            (tx as Promise<TransactionOutcome>).catch((e: Error) => e),
            after1.catch((e: Error) => e),
            (tx2 as Promise<TransactionOutcome>).catch((e: Error) => e),
            marker.catch((e: Error) => e),
          ]);
          if (got[0] !== 'before-value' && !(got[0] instanceof Error)) wrong.push(`${name}: GET got ${String(got[0])}`);
          if (got[2] !== 'after1' && !(got[2] instanceof Error)) wrong.push(`${name}: ECHO got ${String(got[2])}`);
          if (got[4] !== 'marker' && !(got[4] instanceof Error)) wrong.push(`${name}: PING got ${String(got[4])}`);
          if (got[0] instanceof Error || got[2] instanceof Error || got[4] instanceof Error)
            wrong.push(`${name}: neighbour failed ${String(got[0])} ${String(got[2])} ${String(got[4])}`);
          await waitFor(() => client.status === 'ready', 'ready again');
          expect(await client.ping('settle')).toBe('settle');
          await oldConnectionsGone();
          wrong.push(...(await check(key, tag, size, got[1] as TransactionOutcome | Error)).map((w) => `${name}: ${w}`));
          wrong.push(...(await check(key + ':2', tag, size, got[3] as TransactionOutcome | Error)).map((w) => `${name}: tx2 ${w}`));
          wrong.push(...(await inStep(client, key, name)));
          if (!Array.isArray(got[1])) wrong.push(`(info) ${name}: tx outcome ${String(got[1])}`);
        }
        const real = wrong.filter((w) => !w.startsWith('(info)'));
        if (real.length) console.log(wrong.join('\n'));
        expect(real).toEqual([]);
      });
    }
  }

  it('many transactions of sizes 1..5000 in one tick, interleaved with other commands, RESP2 and RESP3', async () => {
    for (const protocol of [2, 3]) {
      const client = await clientOf({ protocol }, server.port);
      await sendLeanTransaction(client, appendsOf(`atk:mix:${protocol}:warm`, 'w', 1));
      const sizes = [1, 2, 127, 128, 129, 1000, 5000, 1, 129, 2];
      const wrong: string[] = [];
      for (let round = 0; round < 3; round++) {
        const txs: Array<Promise<TransactionOutcome | Error>> = [];
        const others: Array<Promise<void>> = [];
        sizes.forEach((size, s) => {
          others.push(client.echo(`e${round}/${s}`).then((v) => void (v !== `e${round}/${s}` && wrong.push(`echo ${v}`))));
          txs.push(
            (
              sendLeanTransaction(client, appendsOf(`atk:mix:${protocol}:${round}:${s}`, `m${s}`, size)) as Promise<TransactionOutcome>
            ).catch((e: Error) => e),
          );
          others.push(client.incr(`atk:mix:${protocol}:ctr`).then(() => undefined));
          // A streamed one (written in parts of 128), as publishMany does where MULTI was answered.
          if (s % 3 === 0) {
            const t = LeanTransaction.begin(client)!;
            for (let i = 0; i < size; i++) {
              t.add(`atk:mix:${protocol}:${round}:${s}:st`, ['v', `st${s}/${i}`]);
              if ((i + 1) % 128 === 0 && i + 1 < size) t.flush();
            }
            const key = `atk:mix:${protocol}:${round}:${s}:st`;
            txs.push(t.commit().catch((e: Error) => e));
            others.push(client.ping(`p${s}`).then((v) => void (v !== `p${s}` && wrong.push(`ping ${v}`))));
            void key;
          }
        });
        const outs = await Promise.all(txs);
        await Promise.all(others);
        let k = 0;
        for (const [s, size] of sizes.entries()) {
          wrong.push(...(await check(`atk:mix:${protocol}:${round}:${s}`, `m${s}`, size, outs[k++])));
          if (s % 3 === 0) wrong.push(...(await check(`atk:mix:${protocol}:${round}:${s}:st`, `st${s}`, size, outs[k++])));
        }
        for (const o of outs) if (!Array.isArray(o)) wrong.push(`failed ${String(o)}`);
      }
      expect(wrong).toEqual([]);
    }
  });

  const ids = (b: Buffer): number[] => [...b.toString('latin1').matchAll(/\$\d+\r\n\d+-\d+\r\n/g)].map((m) => m.index + m[0].length);

  it('ACL -multi: each XADD runs alone; replies cut after k offsets: the k answered offsets are each event’s own, the rest unknown, neighbours in step', async () => {
    await admin.call('ACL', 'SETUSER', 'nomulti', 'reset', 'on', '>pw', '~*', '&*', '+@all', '-multi');
    const wrong: string[] = [];
    for (const [path, k, size] of [
      ['direct', 0, 5],
      ['direct', 1, 5],
      ['direct', 3, 7],
      ['direct', 64, 129],
      ['offline', 2, 9],
      ['offline', 128, 129],
    ] as const) {
      const client = await clientOf({ username: 'nomulti', password: 'pw' });
      await admin.set('atk:before', 'before-value');
      const rule: Rule = (b) =>
        b.includes('$6\r\nmarker\r\n') ? (k === 0 ? b.indexOf('\r\n', b.indexOf('-NOPERM')) + 2 : ids(b)[k - 1]) : undefined;
      if (path === 'direct') proxy.pairOf(client).rule = rule;
      else {
        proxy.nextRule = rule;
        (client as unknown as { stream: Socket }).stream.end();
      }
      const key = `atk:nomulti:${path}:${k}:${size}`;
      const before = client.get('atk:before').catch((e: Error) => e);
      const tx = (sendLeanTransaction(client, appendsOf(key, 'n', size)) as Promise<TransactionOutcome>).catch((e: Error) => e);
      const after = client.echo('after1').catch((e: Error) => e);
      const marker = client.ping('marker').catch((e: Error) => e);
      const [b, outcome, a, m] = await Promise.all([before, tx, after, marker]);
      if (b !== 'before-value' || a !== 'after1' || m !== 'marker')
        wrong.push(`${path} ${k}: neighbours ${String(b)} ${String(a)} ${String(m)}`);
      await waitFor(() => client.status === 'ready', 'ready');
      await client.ping();
      const log = await logOf(key);
      if (log.length !== size) wrong.push(`${path} ${k}: ${log.length} in log`);
      if (!Array.isArray(outcome)) wrong.push(`${path} ${k}: rejected ${String(outcome)}`);
      else
        outcome.forEach((o, i) => {
          if (typeof o === 'string') {
            const at = log.find(([id]) => id === o);
            if (at?.[1] !== `n/${i}`) wrong.push(`${path} ${k}: n/${i} answered ${o}, log has ${at?.[1]}`);
          } else if (o.name === 'ReplyError') wrong.push(`${path} ${k}: n/${i} refused ${o.message} but in the log`);
        });
      if (Array.isArray(outcome)) {
        const answered = outcome.filter((o) => typeof o === 'string').length;
        console.log(`(info) nomulti ${path} k=${k} size=${size}: ${answered} answered`);
      }
      const step = await Promise.all([
        client.get('atk:before'),
        client.echo('s1'),
        client.xadd(`${key}:s`, '*', 'v', 'x'),
        client.echo('s2'),
      ]);
      if (step[0] !== 'before-value' || step[1] !== 's1' || step[3] !== 's2')
        wrong.push(`${path} ${k}: out of step ${JSON.stringify(step)}`);
      client.disconnect();
    }
    expect(wrong).toEqual([]);
  });

  it('OOM midway while queued (maxmemory crossed by the queued XADDs): nothing appended, the OOM is the cause, neighbours in step', async () => {
    const client = await clientOf({}, server.port);
    await sendLeanTransaction(client, appendsOf('atk:oom:warm', 'w', 1));
    const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))![1]);
    const wrong: string[] = [];
    const big = 'x'.repeat(256 * 1024);
    await admin.config('SET', 'maxmemory', String(used + 3 * 1024 * 1024));
    try {
      for (let round = 0; round < 3; round++) {
        const key = `atk:oom:${round}`;
        const before = client.echo('b').catch((e: Error) => e);
        const tx = (
          sendLeanTransaction(
            client,
            Array.from({ length: 40 }, (_, i) => ({ key, fields: ['v', `o/${i}`, 'pad', big] })),
          ) as Promise<TransactionOutcome>
        ).catch((e: Error) => e);
        const small = (sendLeanTransaction(client, appendsOf(`${key}:small`, 'sm', 3)) as Promise<TransactionOutcome>).catch(
          (e: Error) => e,
        );
        const after = client.echo('a').catch((e: Error) => e);
        const [b, outcome, sm, a] = await Promise.all([before, tx, small, after]);
        console.log(
          `(info) oom round ${round}: ${String(outcome instanceof Error ? outcome.message : 'array')} small ${Array.isArray(sm) ? 'array' : String(sm)}`,
        );
        if (b !== 'b' || a !== 'a') wrong.push(`neighbours ${String(b)} ${String(a)}`);
        const log = await admin.xlen(key);
        if (Array.isArray(outcome)) {
          if (log !== 40) wrong.push(`appended but ${log} in log`);
        } else if (log !== 0) wrong.push(`rejected ${outcome.message} but ${log} in log`);
        wrong.push(...(await check(`${key}:small`, 'sm', 3, sm as TransactionOutcome | Error)));
      }
    } finally {
      await admin.config('SET', 'maxmemory', '0');
    }
    const step = await Promise.all([client.echo('s1'), sendLeanTransaction(client, appendsOf('atk:oom:s', 's', 3)), client.echo('s2')]);
    expect(step[0]).toBe('s1');
    expect(step[2]).toBe('s2');
    wrong.push(...(await check('atk:oom:s', 's', 3, step[1] as TransactionOutcome)));
    expect(wrong).toEqual([]);
  });

  it('wrong-type key midway (error inside EXEC): the refused ones are said refused and absent, the others at their offsets', async () => {
    const client = await clientOf({}, server.port);
    await admin.set('atk:wt:string', 'x');
    const appends = Array.from({ length: 129 }, (_, i) => ({ key: i % 10 === 5 ? 'atk:wt:string' : 'atk:wt:s', fields: ['v', `w/${i}`] }));
    const [a, outcome, b] = await Promise.all([
      client.echo('a'),
      sendLeanTransaction(client, appends) as Promise<TransactionOutcome>,
      client.echo('b'),
    ]);
    expect([a, b]).toEqual(['a', 'b']);
    const log = await logOf('atk:wt:s');
    const wrong: string[] = [];
    outcome.forEach((o, i) => {
      if (i % 10 === 5) {
        if (typeof o === 'string' || !/WRONGTYPE/.test(o.message)) wrong.push(`w/${i}: ${String(o)}`);
      } else if (log.find(([id]) => id === o)?.[1] !== `w/${i}`) wrong.push(`w/${i}: ${String(o)}`);
    });
    expect(wrong).toEqual([]);
  });

  it('commandTimeout 20 ms, server paused past it, direct and offline, with and without a cut halfway: outcomes match the log, in step', async () => {
    const wrong: string[] = [];
    for (const [path, cut] of [
      ['direct', false],
      ['direct', true],
      ['offline', false],
      ['offline', true],
    ] as const) {
      const client = await clientOf({ commandTimeout: 20 });
      await sendLeanTransaction(client, appendsOf(`atk:ct:${path}:${cut}:warm`, 'w', 2));
      await admin.set('atk:before', 'before-value');
      const size = 50;
      if (cut) {
        const rule: Rule = (b) => (b.includes('$6\r\nmarker\r\n') ? positions(b, '+QUEUED\r\n')[24] : undefined);
        if (path === 'direct') proxy.pairOf(client).rule = rule;
        else proxy.nextRule = rule;
      }
      await admin.call('CLIENT', 'PAUSE', '200', 'ALL');
      if (path === 'offline') (client as unknown as { stream: Socket }).stream.end();
      const key = `atk:ct:${path}:${cut}`;
      const before = client.get('atk:before').catch((e: Error) => e);
      const tx = (sendLeanTransaction(client, appendsOf(key, 'c', size)) as Promise<TransactionOutcome>).catch((e: Error) => e);
      const after = client.echo('after1').catch((e: Error) => e);
      const tx2 = (sendLeanTransaction(client, appendsOf(`${key}:2`, 'c', 3)) as Promise<TransactionOutcome>).catch((e: Error) => e);
      const marker = client.ping('marker').catch((e: Error) => e);
      const got = await Promise.all([before, tx, after, tx2, marker]);
      console.log(`(info) ct ${path} cut=${cut}: ${got.map((g) => (Array.isArray(g) ? 'array' : String(g))).join(' | ')}`);
      await waitFor(() => client.status === 'ready', 'ready');
      await waitFor(async () => (await client.echo('settle').catch(() => '')) === 'settle', 'settled');
      await oldConnectionsGone();
      wrong.push(...(await check(key, 'c', size, got[1] as TransactionOutcome | Error)).map((w) => `${path} ${cut}: ${w}`));
      wrong.push(...(await check(`${key}:2`, 'c', 3, got[3] as TransactionOutcome | Error)).map((w) => `${path} ${cut}: tx2 ${w}`));
      for (const [i, want] of [
        [0, 'before-value'],
        [2, 'after1'],
        [4, 'marker'],
      ] as const)
        if (!(got[i] instanceof Error) && got[i] !== want) wrong.push(`${path} ${cut}: neighbour ${i} got ${String(got[i])}`);
      wrong.push(...(await inStep(client, key, `${path} ${cut}`)));
      client.disconnect();
    }
    expect(wrong).toEqual([]);
  });

  it('MULTI answered, DISCARD granted or refused by the ACL: a streamed transaction ended by `discard` answers nothing appended, leaves nothing in the log, and stays in step', async () => {
    await admin.call('ACL', 'SETUSER', 'nodiscard', 'reset', 'on', '>pw', '~*', '&*', '+@all', '-discard');
    for (const user of [{}, { username: 'nodiscard', password: 'pw' }]) {
      const client = await clientOf(user, server.port);
      const key = `atk:discard:${Object.keys(user).length}`;
      await sendLeanTransaction(client, appendsOf(`${key}:warm`, 'w', 2));
      const t = LeanTransaction.begin(client)!;
      for (let i = 0; i < 200; i++) {
        t.add(key, ['v', `d/${i}`]);
        if (i === 127) t.flush();
      }
      // Refused, the DISCARD would leave the connection inside the transaction: the EXEC after it ends it.
      const [discarded, echoed] = await Promise.all([t.discard(), client.echo('after')]);
      expect(discarded).toBeUndefined();
      expect(echoed).toBe('after');
      expect(await admin.xlen(key)).toBe(0);
      expect(LeanTransaction.confirmed(client)).toBe(true);
      expect(await check(`${key}:next`, 'n', 3, (await sendLeanTransaction(client, appendsOf(`${key}:next`, 'n', 3)))!)).toEqual([]);
    }
  });

  // Once MULTI was answered on a connection, a transaction is flushed as it is built; an ACL changed at run time
  // may still refuse MULTI, and the XADDs flushed then run on their own. `discard` says so: each one's own reply.
  it('MULTI confirmed, then refused by an ACL change at run time: DISCARD answers the XADDs written, which ran on their own, and the rest is never written', async () => {
    await admin.call('ACL', 'SETUSER', 'laterno', 'reset', 'on', '>pw', '~*', '&*', '+@all');
    const client = await clientOf({ username: 'laterno', password: 'pw' }, server.port);
    await sendLeanTransaction(client, appendsOf('atk:later:warm', 'w', 2));
    expect(LeanTransaction.confirmed(client)).toBe(true);
    await admin.call('ACL', 'SETUSER', 'laterno', '-multi');
    const t = LeanTransaction.begin(client)!;
    for (let i = 0; i < 200; i++) {
      t.add('atk:later', ['v', `l/${i}`]);
      if (i === 127) t.flush();
    }
    const [ran, echoed] = await Promise.all([t.discard(), client.echo('after')]);
    expect(echoed).toBe('after');
    // The 128 written are in the log once each, at the offsets answered; the 72 not written are not.
    expect(ran).toHaveLength(128);
    expect(await logOf('atk:later')).toEqual((ran as TransactionOutcome).map((id, i) => [id, `l/${i}`]));
    // No transaction goes on that client again: the next appends go as commands of their own.
    expect(LeanTransaction.confirmed(client)).toBe(false);
    expect(LeanTransaction.begin(client)).toBeUndefined();
    expect(sendLeanTransaction(client, appendsOf('atk:later:next', 'n', 3))).toBeUndefined();
    expect(await client.echo('in step')).toBe('in step');
  });
});
