import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { createServer, Server, Socket } from 'node:net';
import { EventrailPublisher, PublishInput, PublishManyError, RedisFullError } from '../../lib';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { EventrailKeys } from '../../lib/redis/keys';
import { eventrailAclRules } from '../../lib/redis/acl-rules';
import { isBigEntry } from '../../lib/redis/big-entries';
import { encodeFields } from '../../lib/wire/codec';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createApp } from '../support/app';
import { waitFor } from '../support/helpers';
import { RedisServer, freePort, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';

/**
 * Attacks on `publishMany` (and coalesced `publish`) sent as one MULTI/EXEC of
 * plain XADDs (lean-command.ts, `sendLeanTransaction`): faults at random
 * moments, odd client options and hostile data, each checked against the
 * stream contents read through a separate admin connection, and against the
 * replies other commands on the SAME connection get afterwards (a desync would
 * hand them someone else's reply).
 */
const PARTITIONS = 4;

interface Landed {
  partition: number;
  offset: string;
  event: string;
  data: string;
}

describe('publishMany as one transaction, attacked', () => {
  let server: RedisServer;
  let admin: Redis;
  const apps: INestApplicationContext[] = [];

  beforeAll(async () => {
    server = await startRedisServer(undefined, ['--enable-debug-command', 'yes']);
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close().catch(() => undefined)));
    admin?.disconnect();
    await server?.stop();
  });

  async function publisherOf(
    prefix: string,
    redisOptions: Record<string, unknown> | Redis = {},
    extra: Record<string, unknown> = {},
    partitions = PARTITIONS,
    url = server.url,
  ): Promise<EventrailPublisher> {
    const port = Number(new URL(url).port);
    const app = await createApp({
      redis: redisOptions instanceof Redis ? redisOptions : { host: '127.0.0.1', port, ...redisOptions },
      prefix,
      partitions,
      ...extra,
    } as never);
    apps.push(app);
    const publisher = app.get(EventrailPublisher);
    // The first publishMany asks whether scripts run here; transactions go after the answer.
    await publisher.publishMany(
      [0, 1].map((n) => ({ event: 'warm', data: { n }, partition: 0 })),
      { durability: 'acknowledged' },
    );
    return publisher;
  }

  function clientOf(publisher: EventrailPublisher): Redis {
    return (publisher as unknown as { redis: EventrailRedis }).redis.client as Redis;
  }

  /** Every entry of `event` in the log, per partition in stream order. */
  async function landed(prefix: string, event = 'tx', partitions = PARTITIONS, on: Redis = admin): Promise<Landed[]> {
    const keys = new EventrailKeys(prefix, partitions);
    const found: Landed[] = [];
    for (let p = 0; p < partitions; p++) {
      if ((await on.type(keys.stream(p))) !== 'stream') continue;
      for (const [offset, fields] of await on.xrange(keys.stream(p), '-', '+')) {
        const got = fields[fields.indexOf('event') + 1];
        if (got === event) found.push({ partition: p, offset, event: got, data: fields[fields.indexOf('data') + 1] });
      }
    }
    return found;
  }

  /** Replies on the publisher's own connection still belong to their own commands. */
  async function assertInStep(publisher: EventrailPublisher, tag: string, on: Redis = admin, base = `attack:${tag}`): Promise<void> {
    const client = clientOf(publisher);
    await on.set(`${base}:a`, `value-a-${tag}`);
    await on.set(`${base}:b`, `value-b-${tag}`);
    // Commands an eventrail ACL user may run too (GET, PING, EXISTS), on keys it may read when `base` is under its prefix.
    const [a, pong, b, exists, missing] = await Promise.all([
      client.get(`${base}:a`),
      client.ping(`ping-${tag}`),
      client.get(`${base}:b`),
      client.exists(`${base}:a`, `${base}:none`),
      client.get(`${base}:none`),
    ]);
    expect([a, pong, b, exists, missing]).toEqual([`value-a-${tag}`, `ping-${tag}`, `value-b-${tag}`, 1, null]);
  }

  /** Checks a publishMany's outcome against the log: appended ones at their offsets with their data, refused ones absent. */
  async function checkAgainstLog(
    prefix: string,
    inputs: PublishInput[],
    outcome: unknown,
    event = 'tx',
    partitions = PARTITIONS,
  ): Promise<{ appended: number; unknown: number; refused: number }> {
    const all = await landed(prefix, event, partitions);
    const byData = new Map<string, Landed[]>();
    for (const entry of all) byData.set(entry.data, [...(byData.get(entry.data) ?? []), entry]);
    const tally = { appended: 0, unknown: 0, refused: 0 };
    const outcomes: string[] =
      outcome instanceof PublishManyError
        ? [...outcome.outcomes]
        : Array.isArray(outcome)
          ? inputs.map(() => 'appended')
          : inputs.map(() => 'unknown');
    const results = outcome instanceof PublishManyError ? outcome.results : Array.isArray(outcome) ? outcome : [];
    for (const [i, input] of inputs.entries()) {
      const json = JSON.stringify(input.data);
      const copies = byData.get(json) ?? [];
      if (outcomes[i] === 'appended') {
        tally.appended++;
        const result = results[i] as { partition: number; offset: string };
        expect({
          i,
          offset: result?.offset,
          found: copies.some((c) => c.offset === result?.offset && c.partition === result.partition),
        }).toEqual({
          i,
          offset: result?.offset,
          found: true,
        });
      } else if (outcomes[i] === 'not-appended') {
        tally.refused++;
        expect({ i, copies: copies.length }).toEqual({ i, copies: 0 });
      } else tally.unknown++;
    }
    return tally;
  }

  // ---------------------------------------------------------------------------------------------
  // commandTimeout: a MULTI whose ioredis timer fired before its (late) +OK arrived
  // ---------------------------------------------------------------------------------------------

  /** A user who may XADD to partition 0's stream only (a selector): XADD to another partition is refused while queued (NOPERM). */
  async function partialXaddUser(prefix: string, name: string): Promise<{ username: string; password: string }> {
    const rules = eventrailAclRules(prefix);
    const keys = new EventrailKeys(prefix, PARTITIONS);
    const root = `${rules.full} ${rules.optional} -xadd`.split(' ');
    await admin.call('ACL', 'SETUSER', name, 'reset', 'on', '>secret', ...root, `(+xadd ~${keys.stream(0)})`);
    await admin.hset(keys.meta, 'partitions', String(PARTITIONS));
    return { username: name, password: 'secret' };
  }

  it('commandTimeout: a transaction refused while queued (NOPERM on one partition) after MULTI timed out appends nothing and says so', async () => {
    const prefix = 'atk-ct-acl';
    const user = await partialXaddUser(prefix, 'atk-ct-acl');
    const publisher = await publisherOf(prefix, { ...user, commandTimeout: 150 });
    const inputs: PublishInput[] = Array.from({ length: 8 }, (_, n) => ({ event: 'tx', data: { n, p: n % 2 }, partition: n % 2 }));
    // Without the delay, the refusal is reported right (the control).
    const control = await publisher.publishMany(inputs.map((input) => ({ ...input, event: 'control' }))).catch((e: unknown) => e);
    expect(control).toBeInstanceOf(PublishManyError);
    expect((control as PublishManyError).outcomes).toEqual(inputs.map(() => 'not-appended'));
    // The server stops answering for 600 ms (longer than commandTimeout): the MULTI's timer fires, then Redis answers it all.
    await admin.call('CLIENT', 'PAUSE', '600', 'ALL');
    const outcome = await publisher.publishMany(inputs).catch((e: unknown) => e);
    await waitFor(async () => (await admin.ping()) === 'PONG', 'the pause ended');
    expect(await landed(prefix)).toEqual([]);
    expect(outcome).toBeInstanceOf(PublishManyError);
    expect({
      outcomes: (outcome as PublishManyError).outcomes,
      offsets: (outcome as PublishManyError).results.map((r) => r?.offset),
    }).toEqual({ outcomes: inputs.map(() => 'not-appended'), offsets: inputs.map(() => undefined) });
    await assertInStep(publisher, 'ct-acl', admin, `${prefix}:in-step`);
  });

  it('commandTimeout: coalesced publish() callers of a refused transaction whose MULTI timed out are each refused', async () => {
    const prefix = 'atk-ct-coalesced';
    const user = await partialXaddUser(prefix, 'atk-ct-co');
    const publisher = await publisherOf(prefix, { ...user, commandTimeout: 150 });
    await admin.call('CLIENT', 'PAUSE', '600', 'ALL');
    // The first call of the tick goes alone (partition 1: refused on its own); the other 9 leave together as one transaction.
    const calls = Array.from({ length: 10 }, (_, n) =>
      publisher.publish('tx', { n }, { partition: (n + 1) % 2 }).then(
        (result) => ({ ok: true as const, offset: result.offset }),
        (error: unknown) => ({ ok: false as const, error: String(error) }),
      ),
    );
    const settled = await Promise.all(calls);
    const log = await landed(prefix);
    // Each caller is told what its own event came to: appended ones are in the log at their offset, refused ones are not.
    expect(settled.map((s) => (s.ok ? `appended at ${s.offset}` : 'refused'))).toEqual(
      settled.map((_, n) => {
        const entry = log.find((e) => e.data === JSON.stringify({ n }));
        return entry ? `appended at ${entry.offset}` : 'refused';
      }),
    );
    expect(log).toEqual([]);
    await assertInStep(publisher, 'ct-co', admin, `${prefix}:in-step`);
  });

  it('commandTimeout: replies cut after the QUEUED replies (EXEC unanswered) while MULTI had timed out: reported unknown, never appended at "QUEUED"', async () => {
    const prefix = 'atk-ct-cut';
    const proxy = await CutProxy.start(server.port);
    try {
      const publisher = await publisherOf(prefix, { port: proxy.port, commandTimeout: 150 }, {}, PARTITIONS, server.url);
      const client = clientOf(publisher);
      const inputs: PublishInput[] = Array.from({ length: 20 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
      const pair = proxy.pairOf(client);
      pair.holdDown = true;
      const sentAt = Date.now();
      const sent = publisher.publishMany(inputs).catch((e: unknown) => e);
      // Redis ran the transaction; its replies are held on the way back past the MULTI's commandTimeout.
      await waitFor(
        () => (countOf(Buffer.concat(pair.held), '+QUEUED\r\n') === 20 && Buffer.concat(pair.held).includes('*20\r\n') ? true : false),
        'all replies held',
      );
      await waitFor(() => Date.now() - sentAt > 400, 'past commandTimeout');
      // What reaches the client: +OK and the 20 +QUEUED; then the connection dies before EXEC's array arrives.
      pair.releaseDownUntil((held) => held.lastIndexOf('+QUEUED\r\n') + '+QUEUED\r\n'.length);
      const outcome = await sent;
      const log = await landed(prefix);
      expect(log).toHaveLength(20);
      const offsets =
        outcome instanceof PublishManyError
          ? outcome.results.map((r) => r?.offset)
          : (outcome as Array<{ offset: string }>).map((r) => r.offset);
      expect(offsets.filter((o) => o === 'QUEUED')).toEqual([]);
      if (outcome instanceof PublishManyError) expect(outcome.outcomes).toEqual(inputs.map(() => 'unknown'));
      else await checkAgainstLog(prefix, inputs, outcome);
      await waitFor(() => clientOf(publisher).status === 'ready', 'reconnected');
      await assertInStep(publisher, 'ct-cut');
    } finally {
      await proxy.close();
    }
  });

  // ---------------------------------------------------------------------------------------------
  // Random CLIENT KILL during a stream of transactions, coalesced publishes and reads
  // ---------------------------------------------------------------------------------------------

  it('CLIENT KILL at random moments: every outcome matches the log and every read on the connection gets its own reply', async () => {
    const prefix = 'atk-kill';
    const publisher = await publisherOf(prefix, {}, { publishTimeoutMs: 5_000 });
    const client = clientOf(publisher);
    const random = seededRandom(11);
    const mismatches: string[] = [];
    let tally = { appended: 0, unknown: 0, refused: 0 };
    let serial = 0;
    const ids: string[] = [];
    for (let round = 0; round < 30; round++) {
      await waitFor(() => client.status === 'ready', 'ready');
      const id = String(await client.client('ID'));
      ids.push(id);
      await admin.set(`atk-kill:r${round}`, `round-${round}`);
      const batches: PublishInput[][] = Array.from({ length: 3 }, () =>
        Array.from({ length: 2 + Math.floor(random() * 400) }, () => ({
          event: 'tx',
          data: { n: serial++, pad: 'x'.repeat(Math.floor(random() * 300)) },
          partition: Math.floor(random() * PARTITIONS),
        })),
      );
      const singles = Array.from({ length: 20 }, () => ({ n: serial++ }));
      const work: Array<Promise<unknown>> = [];
      const reads: Array<Promise<void>> = [];
      for (const batch of batches) {
        work.push(publisher.publishMany(batch).catch((e: unknown) => e));
        reads.push(
          client.get(`atk-kill:r${round}`).then(
            (v) => void (v !== `round-${round}` && mismatches.push(`GET got ${String(v)}`)),
            () => undefined,
          ),
        );
        reads.push(
          client.ping(`p${round}`).then(
            (v) => void (v !== `p${round}` && mismatches.push(`PING got ${String(v)}`)),
            () => undefined,
          ),
        );
      }
      const singleOutcomes = singles.map((data) =>
        publisher.publish('tx', data, { partition: data.n % PARTITIONS }).then(
          (r) => r,
          (e: unknown) => e,
        ),
      );
      const delay = Math.floor(random() * 6);
      if (delay === 0) await admin.call('CLIENT', 'KILL', 'ID', id).catch(() => undefined);
      else setTimeout(() => void admin.call('CLIENT', 'KILL', 'ID', id).catch(() => undefined), delay);
      const outcomes = await Promise.all(work);
      await Promise.all(reads);
      for (const [b, batch] of batches.entries()) {
        const t = await checkAgainstLog(prefix, batch, outcomes[b]);
        tally = { appended: tally.appended + t.appended, unknown: tally.unknown + t.unknown, refused: tally.refused + t.refused };
      }
      const singleResults = await Promise.all(singleOutcomes);
      const log = await landed(prefix);
      for (const [i, result] of singleResults.entries()) {
        if (result && typeof result === 'object' && 'offset' in result) {
          const entry = log.find((e) => e.offset === (result as { offset: string }).offset && e.partition === singles[i].n % PARTITIONS);
          if (entry?.data !== JSON.stringify(singles[i]))
            mismatches.push(`publish ${singles[i].n} answered ${(result as { offset: string }).offset}, log has ${entry?.data}`);
        }
      }
    }
    expect(mismatches).toEqual([]);
    await waitFor(() => client.status === 'ready', 'ready');
    await assertInStep(publisher, 'kill');
    // Some rounds were cut and some were not: the attack reached both sides.
    expect(tally.appended).toBeGreaterThan(0);
    // Every round's kill took effect: a new connection each round (cut mid-transaction or before its answer: resent whole).
    expect(new Set(ids).size).toBe(30);
  });

  // ---------------------------------------------------------------------------------------------
  // A proxy that drops the connection part way through the write of a large transaction
  // ---------------------------------------------------------------------------------------------

  it('a connection dropped mid-write of 1000 x 2 KiB: nothing half-appended, outcome matches the log, replies in step', async () => {
    const prefix = 'atk-midwrite';
    const proxy = await CutProxy.start(server.port);
    try {
      const publisher = await publisherOf(prefix, { port: proxy.port });
      const client = clientOf(publisher);
      const total = 1000 * 2100;
      for (const [c, cut] of [10, 5_000, 300_000, 1_000_000, 1_900_000, total - 100].entries()) {
        await waitFor(() => client.status === 'ready', 'ready');
        const inputs: PublishInput[] = Array.from({ length: 1000 }, (_, n) => ({
          event: `tx${c}`,
          data: { n, pad: 'p'.repeat(2048) },
          partition: n % PARTITIONS,
        }));
        proxy.pairOf(client).upLimit = cut;
        const outcome = await publisher.publishMany(inputs).catch((e: unknown) => e);
        await waitFor(() => client.status === 'ready', 'reconnected');
        // Anything that can still land (a resend) lands before the check.
        await waitFor(async () => (await client.ping('settled')) === 'settled', 'settled');
        const log = await landed(prefix, `tx${c}`);
        // All or nothing: a cut transaction never leaves part of itself (or a resent copy, for more than one whole).
        expect({ c, count: log.length % 1000 }).toEqual({ c, count: 0 });
        await checkAgainstLog(prefix, inputs, outcome, `tx${c}`);
        await assertInStep(publisher, `mw${c}`);
      }
    } finally {
      await proxy.close();
    }
  });

  // ---------------------------------------------------------------------------------------------
  // Refusals while queued: BUSY (a long script), OOM; errors inside EXEC over RESP3
  // ---------------------------------------------------------------------------------------------

  it('BUSY: transactions and coalesced publishes sent while a script blocks the server append nothing and say not-appended', async () => {
    const prefix = 'atk-busy';
    const publisher = await publisherOf(prefix, {}, { publishTimeoutMs: 10_000 });
    await admin.config('SET', 'busy-reply-threshold', '50');
    const blocker = new Redis(server.url);
    const probe = new Redis(server.url);
    try {
      // Both connected before the script starts: a connection that connects while the server is busy has its
      // ready check (INFO) refused with BUSY, and ioredis then fails what was queued on it, SCRIPT KILL
      // included (under the load of a CI run, the probe connected after the script had started).
      await Promise.all([blocker.ping(), probe.ping()]);
      const script =
        "local t = redis.call('TIME') while true do local n = redis.call('TIME') if (n[1]-t[1])*1000000 + (n[2]-t[2]) > 20000000 then break end end return 1";
      const blocked = blocker.eval(script, 0).catch((e: unknown) => e);
      await waitFor(async () => /BUSY/.test(String(await probe.ping().catch((e: unknown) => e))), 'the server busy');
      const inputs: PublishInput[] = Array.from({ length: 30 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
      const many = publisher.publishMany(inputs).catch((e: unknown) => e);
      const singles = Array.from({ length: 6 }, (_, n) =>
        publisher.publish('tx', { n: 100 + n }, { partition: n % PARTITIONS }).catch((e: unknown) => e),
      );
      const outcome = await many;
      await probe.call('SCRIPT', 'KILL');
      await blocked;
      expect(outcome).toBeInstanceOf(PublishManyError);
      expect((outcome as PublishManyError).outcomes).toEqual(inputs.map(() => 'not-appended'));
      expect(String((outcome as PublishManyError).cause)).toMatch(/BUSY/);
      for (const single of await Promise.all(singles)) expect(single).toBeInstanceOf(Error);
      expect(await landed(prefix)).toEqual([]);
      await assertInStep(publisher, 'busy');
    } finally {
      await admin.config('SET', 'busy-reply-threshold', '5000');
      blocker.disconnect();
      probe.disconnect();
    }
  });

  it('OOM: a transaction over maxmemory appends nothing, reports all not-appended with RedisFullError; coalesced callers refused too', async () => {
    const prefix = 'atk-oom';
    const publisher = await publisherOf(prefix);
    await admin.config('SET', 'maxmemory', '1');
    try {
      const inputs: PublishInput[] = Array.from({ length: 50 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
      const outcome = await publisher.publishMany(inputs).catch((e: unknown) => e);
      const singles = await Promise.all(
        Array.from({ length: 5 }, (_, n) =>
          publisher.publish('tx', { n: 100 + n }, { partition: n % PARTITIONS }).catch((e: unknown) => e),
        ),
      );
      expect(outcome).toBeInstanceOf(PublishManyError);
      expect((outcome as PublishManyError).outcomes).toEqual(inputs.map(() => 'not-appended'));
      expect((outcome as PublishManyError).cause).toBeInstanceOf(RedisFullError);
      for (const single of singles) expect(single).toBeInstanceOf(RedisFullError);
    } finally {
      await admin.config('SET', 'maxmemory', '0');
    }
    expect(await landed(prefix)).toEqual([]);
    await assertInStep(publisher, 'oom');
  });

  it('RESP3, autopipelining, db 5, commandTimeout, no offline queue, a user-passed client, 64 partitions with keys: exact offsets, WRONGTYPE inside EXEC says which', async () => {
    const configs: Array<[string, Record<string, unknown> | (() => Redis), number, number]> = [
      ['atk-resp3', { protocol: 3 }, PARTITIONS, 0],
      ['atk-resp3map', { protocol: 3, replyMapping: 'resp3' }, PARTITIONS, 0],
      ['atk-autopipe', { enableAutoPipelining: true }, PARTITIONS, 0],
      ['atk-db5', { db: 5 }, PARTITIONS, 5],
      ['atk-ctimeout', { commandTimeout: 2_000 }, PARTITIONS, 0],
      ['atk-nooffline', { enableOfflineQueue: false }, PARTITIONS, 0],
      ['atk-stringnums', { stringNumbers: true }, PARTITIONS, 0],
      ['atk-own', () => new Redis(server.url), PARTITIONS, 0],
      ['atk-p64', {}, 64, 0],
    ];
    for (const [prefix, options, partitions, db] of configs) {
      const on = db === 0 ? admin : new Redis(server.url, { db });
      const publisher = await publisherOf(prefix, typeof options === 'function' ? options() : options, {}, partitions);
      const keys = new EventrailKeys(prefix, partitions);
      // Keys spread over the partitions: the partition comes from the key.
      const inputs: PublishInput[] = Array.from({ length: 200 }, (_, n) => ({
        event: 'tx',
        data: { n, s: 'é\r\n$3\r\n*1' },
        key: `k${n % 37}`,
      }));
      const results = await publisher.publishMany(inputs);
      const log = await landed(prefix, 'tx', partitions, on);
      expect({ prefix, count: log.length }).toEqual({ prefix, count: 200 });
      for (const [i, result] of results.entries()) {
        const entry = log.find((e) => e.partition === result.partition && e.offset === result.offset);
        expect({ prefix, i, data: entry?.data }).toEqual({ prefix, i, data: JSON.stringify(inputs[i].data) });
      }
      // Same key, call order: offsets rise.
      for (let k = 0; k < 37; k++) {
        const mine = results.filter((_, i) => i % 37 === k).map((r) => r.offset);
        expect(mine).toEqual([...mine].sort((a, b) => compareOffsets(a, b)));
      }
      // A partition's key replaced by a string: its events are refused inside EXEC, the others appended, and the connection stays in step.
      const bad = results[0].partition;
      await on.del(keys.stream(bad));
      await on.set(keys.stream(bad), 'not a stream');
      const second: PublishInput[] = Array.from({ length: 40 }, (_, n) => ({ event: 'tx2', data: { n }, key: `k${n % 37}` }));
      const error = await publisher.publishMany(second).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PublishManyError);
      const want = second.map((_, n) => (results[n % 37].partition === bad ? 'not-appended' : 'appended'));
      expect({ prefix, outcomes: (error as PublishManyError).outcomes }).toEqual({ prefix, outcomes: want });
      expect((await landed(prefix, 'tx2', partitions, on)).length).toBe(want.filter((o) => o === 'appended').length);
      await on.del(keys.stream(bad));
      const single = await publisher.publish('after', { n: 0 }, { key: 'k0' });
      const [last] = await on.xrevrange(keys.stream(single.partition), '+', '-', 'COUNT', 1);
      expect({ prefix, offset: single.offset }).toEqual({ prefix, offset: last[0] });
      if (on !== admin) on.disconnect();
    }
  });

  it('durability replicated: WAIT after the transaction, with no replica (ReplicationTimeoutError, entries appended) and with one (confirmed)', async () => {
    const prefix = 'atk-repl';
    const publisher = await publisherOf(prefix, {}, { durability: 'replicated', replication: { replicas: 1, timeoutMs: 200 } });
    const inputs: PublishInput[] = Array.from({ length: 40 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
    const alone = await publisher.publishMany(inputs).catch((e: unknown) => e);
    // Nothing confirmed it, yet all 40 were appended: the error says so, and the log agrees.
    expect(alone).toBeInstanceOf(Error);
    expect(await landed(prefix)).toHaveLength(40);
    // Its own directory: a replica writes the RDB it receives into its --dir (the shared tmpdir would hand it to every later server).
    const replica = await startRedisServer(undefined, [
      '--replicaof',
      '127.0.0.1',
      String(server.port),
      '--dir',
      mkdtempSync(join(tmpdir(), 'atk-replica-')),
    ]);
    try {
      const onReplica = new Redis(replica.url);
      await waitFor(async () => /master_link_status:up/.test(await onReplica.info('replication')), 'replica linked');
      const results = await publisher.publishMany(inputs.map((input) => ({ ...input, event: 'tx2' })));
      expect(results).toHaveLength(40);
      const onReplicaLog = await landed(prefix, 'tx2', PARTITIONS, onReplica);
      expect(onReplicaLog.map((e) => e.offset).sort()).toEqual(results.map((r) => r.offset).sort());
      onReplica.disconnect();
      await assertInStep(publisher, 'repl');
    } finally {
      await replica.stop();
    }
  });

  // ---------------------------------------------------------------------------------------------
  // publishTimeoutMs shorter than a stall: late replies after the deadline
  // ---------------------------------------------------------------------------------------------

  it('publishTimeoutMs 200 with DEBUG SLEEP 1: reported unknown, the late replies are absorbed by their own commands', async () => {
    const prefix = 'atk-late';
    const publisher = await publisherOf(prefix, {}, { publishTimeoutMs: 200 });
    const sleeper = new Redis(server.url);
    try {
      const slept = sleeper.call('DEBUG', 'SLEEP', '1');
      // The server is asleep once a PING on another connection goes unanswered for 100 ms.
      const probe = new Redis(server.url);
      await waitFor(
        async () => (await Promise.race([probe.ping(), new Promise((resolve) => setTimeout(() => resolve('asleep'), 100))])) === 'asleep',
        'the server asleep',
        5_000,
      );
      probe.disconnect();
      const inputs: PublishInput[] = Array.from({ length: 100 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
      const many = publisher.publishMany(inputs).catch((e: unknown) => e);
      const singles = Array.from({ length: 8 }, (_, n) =>
        publisher.publish('tx', { n: 1000 + n }, { partition: n % PARTITIONS }).catch((e: unknown) => e),
      );
      const client = clientOf(publisher);
      const get = client.get('atk-late:key');
      const outcome = await many;
      expect(outcome).toBeInstanceOf(PublishManyError);
      expect((outcome as PublishManyError).outcomes).toEqual(inputs.map(() => 'unknown'));
      await slept;
      expect(await get).toBeNull();
      for (const single of await Promise.all(singles)) expect(single).toBeInstanceOf(Error);
      await waitFor(async () => (await landed(prefix)).length === 108, 'the late transaction landed');
      await assertInStep(publisher, 'late');
      const after = await publisher.publishMany(inputs.map((input) => ({ ...input, event: 'after' })));
      await checkAgainstLog(prefix, inputs, after, 'after');
    } finally {
      sleeper.disconnect();
    }
  });

  // ---------------------------------------------------------------------------------------------
  // Hostile input
  // ---------------------------------------------------------------------------------------------

  it('hostile data (CRLF, RESP framing, unicode, empty), sizes either side of the big-entry line, 1000 and 1001 events', async () => {
    const prefix = 'atk-input';
    const publisher = await publisherOf(prefix);
    const texts = [
      '',
      '\r\n',
      '*3\r\n$4\r\nPING\r\n',
      '$-1\r\n',
      '+QUEUED\r\n',
      '-ERR x\r\n',
      '😀'.repeat(2000),
      '\u0000\u2028\u2029',
      'ü'.repeat(5000),
    ];
    const hostile: PublishInput[] = texts.map((text, n) => ({ event: 'tx', data: { n, text }, key: `\r\n*1\r\n$4\r\nPING\r\n${n}` }));
    await checkAgainstLog(prefix, hostile, await publisher.publishMany(hostile));
    // The big-entry line: the longest padding that is not big, and one more.
    let lo = 0;
    let hi = 20_000;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (isBigEntry(encodeFields({ event: 'edge', data: JSON.stringify({ n: 0, pad: 'é'.repeat(mid) }) } as never))) hi = mid - 1;
      else lo = mid;
    }
    const before = { exec: await calls('exec'), evalsha: await calls('evalsha') };
    const under: PublishInput[] = [0, 1, 2].map((n) => ({ event: 'edge', data: { n, pad: 'é'.repeat(lo) }, partition: 1 }));
    const r1 = await publisher.publishMany(under);
    const mid = { exec: await calls('exec'), evalsha: await calls('evalsha') };
    expect(mid.exec - before.exec).toBe(1);
    const over: PublishInput[] = [3, 4, 5].map((n) => ({
      event: 'edge',
      data: { n, pad: 'é'.repeat(n === 4 ? lo + 1 : lo) },
      partition: 1,
    }));
    const r2 = await publisher.publishMany(over);
    expect((await calls('exec')) - mid.exec).toBe(0);
    await checkAgainstLog(prefix, [...under, ...over], [...r1, ...r2], 'edge');
    // The big one is in the partition's index.
    const keys = new EventrailKeys(prefix, PARTITIONS);
    expect(
      (await admin.zscore(keys.bigEntries(1), r2[1].offset).catch(() => null)) ?? (await admin.zrange(keys.bigEntries(1), 0, -1)).join(),
    ).toBeTruthy();
    for (const count of [1000, 1001]) {
      const inputs: PublishInput[] = Array.from({ length: count }, (_, n) => ({
        event: `n${count}`,
        data: { n },
        partition: n % PARTITIONS,
      }));
      const e0 = await calls('exec');
      const results = await publisher.publishMany(inputs);
      expect({ count, execs: (await calls('exec')) - e0 }).toEqual({ count, execs: count <= 1000 ? 1 : 0 });
      await checkAgainstLog(prefix, inputs, results, `n${count}`);
    }
    await assertInStep(publisher, 'input');
  });

  it('a getter that throws (late in the batch) appends nothing and reports all not-appended; one that changes on a second read is read once', async () => {
    const prefix = 'atk-getter';
    const publisher = await publisherOf(prefix);
    const e0 = await execsRun();
    // Thrown at the first read (the up-front check) and at a later read (the serialisation, after the check).
    for (const throwOnRead of [1, 2]) {
      let boomReads = 0;
      const inputs: PublishInput[] = Array.from({ length: 600 }, (_, n) => ({
        event: 'tx',
        data:
          n === 577
            ? {
                n,
                get boom(): string {
                  if (++boomReads >= throwOnRead) throw new Error('getter threw');
                  return 'fine';
                },
              }
            : { n },
        partition: n % PARTITIONS,
      }));
      const error = await publisher.publishMany(inputs).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Error);
      if (error instanceof PublishManyError) expect(error.outcomes).toEqual(inputs.map(() => 'not-appended'));
      else expect((error as Error).name).toBe('InvalidEventDataError');
      expect(await landed(prefix)).toEqual([]);
      expect((await execsRun()) - e0).toBe(0);
    }
    let reads = 0;
    const changing: PublishInput[] = [0, 1, 2].map((n) => ({
      event: 'chg',
      data: {
        n,
        get v(): number {
          return ++reads;
        },
      },
      partition: 0,
    }));
    const results = await publisher.publishMany(changing);
    const log = await landed(prefix, 'chg');
    expect(log.map((e) => e.offset)).toEqual(results.map((r) => r.offset));
    const seen = log.map((e) => (JSON.parse(e.data) as { v: number }).v);
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
    await assertInStep(publisher, 'getter');
  });

  // ---------------------------------------------------------------------------------------------
  // Many concurrent callers, publishMany mixed in, and a kill; then a server SIGKILL + restart
  // ---------------------------------------------------------------------------------------------

  it('500 concurrent publish() callers and 10 publishMany calls, with a kill in the middle: each caller gets its own outcome', async () => {
    const prefix = 'atk-crowd';
    const publisher = await publisherOf(prefix);
    const client = clientOf(publisher);
    const random = seededRandom(5);
    const wrong: string[] = [];
    for (let round = 0; round < 4; round++) {
      await waitFor(() => client.status === 'ready', 'ready');
      const id = String(await client.client('ID'));
      const singles: Array<{ data: { r: number; n: number }; partition: number; out: Promise<unknown> }> = [];
      const manys: Array<{ inputs: PublishInput[]; out: Promise<unknown> }> = [];
      for (let n = 0; n < 500; n++) {
        const data = { r: round, n };
        const partition = Math.floor(random() * PARTITIONS);
        singles.push({ data, partition, out: publisher.publish('tx', data, { partition }).catch((e: unknown) => e) });
        if (n % 50 === 0) {
          const inputs: PublishInput[] = Array.from({ length: 30 }, (_, m) => ({
            event: 'many',
            data: { r: round, n, m },
            partition: m % PARTITIONS,
          }));
          manys.push({ inputs, out: publisher.publishMany(inputs).catch((e: unknown) => e) });
        }
        if (n === 250 && round % 2 === 1) void admin.call('CLIENT', 'KILL', 'ID', id).catch(() => undefined);
      }
      const outs = await Promise.all(singles.map((s) => s.out));
      const log = await landed(prefix);
      const byOffset = new Map(log.map((e) => [`${e.partition}/${e.offset}`, e.data]));
      for (const [i, s] of singles.entries()) {
        const out = outs[i] as { offset?: string; partition?: number } | Error;
        if (out instanceof Error) continue;
        if (byOffset.get(`${out.partition}/${out.offset}`) !== JSON.stringify(s.data))
          wrong.push(
            `r${round} ${s.data.n}: answered ${out.partition}/${out.offset}, log has ${byOffset.get(`${out.partition}/${out.offset}`)}`,
          );
      }
      for (const m of manys) await checkAgainstLog(prefix, m.inputs, await m.out, 'many');
    }
    expect(wrong).toEqual([]);
    await waitFor(() => client.status === 'ready', 'ready');
    await assertInStep(publisher, 'crowd');
  });

  it('redis-server SIGKILLed and restarted on its port (appendfsync always) mid-stream: nothing acknowledged lost, replies in step', async () => {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'atk-aof-'));
    const args = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let own = await startRedisServer(port, args);
    const prefix = 'atk-restart';
    const publisher = await publisherOf(prefix, {}, { publishTimeoutMs: 8_000 }, PARTITIONS, own.url);
    const client = clientOf(publisher);
    const onOwn = new Redis(own.url, { retryStrategy: () => 50 });
    try {
      const acknowledged: Array<{ partition: number; offset: string; data: string }> = [];
      for (let round = 0; round < 3; round++) {
        const work: Array<{ inputs: PublishInput[]; out: Promise<unknown> }> = [];
        for (let b = 0; b < 6; b++) {
          const inputs: PublishInput[] = Array.from({ length: 200 }, (_, n) => ({
            event: 'tx',
            data: { round, b, n },
            partition: n % PARTITIONS,
          }));
          work.push({ inputs, out: publisher.publishMany(inputs).catch((e: unknown) => e) });
        }
        await own.stop('SIGKILL');
        own = await startRedisServer(port, args);
        for (const { inputs, out } of work) {
          const outcome = await out;
          const results = outcome instanceof PublishManyError ? outcome.results : Array.isArray(outcome) ? outcome : [];
          results.forEach(
            (r, i) => r && acknowledged.push({ partition: r.partition, offset: r.offset, data: JSON.stringify(inputs[i].data) }),
          );
        }
        await waitFor(() => client.status === 'ready', 'reconnected');
      }
      await waitFor(async () => (await onOwn.ping()) === 'PONG', 'admin reconnected');
      const log = await landed(prefix, 'tx', PARTITIONS, onOwn);
      const byOffset = new Map(log.map((e) => [`${e.partition}/${e.offset}`, e.data]));
      expect(acknowledged.filter((a) => byOffset.get(`${a.partition}/${a.offset}`) !== a.data)).toEqual([]);
      await onOwn.set('attack:restart', 'v');
      expect(await client.get('attack:restart')).toBe('v');
      expect(await client.ping('restart')).toBe('restart');
    } finally {
      onOwn.disconnect();
      await own.stop();
    }
  });

  it('CLIENT PAUSE WRITE then kill, with coalesced publishes and reads queued behind the held transaction: all unknown or refused, replies in step', async () => {
    const prefix = 'atk-pause';
    const publisher = await publisherOf(prefix);
    const client = clientOf(publisher);
    const id = String(await client.client('ID'));
    await admin.set('atk-pause:k', 'pause-value');
    await admin.call('CLIENT', 'PAUSE', '20000', 'WRITE');
    let outcome: unknown;
    let pending: Array<Promise<unknown>>;
    let get: Promise<unknown>;
    const inputs: PublishInput[] = Array.from({ length: 100 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
    try {
      const many = publisher.publishMany(inputs).catch((e: unknown) => e);
      pending = Array.from({ length: 10 }, (_, n) =>
        publisher.publish('tx', { n: 100 + n }, { partition: n % PARTITIONS }).catch((e: unknown) => e),
      );
      get = client.get('atk-pause:k').catch((e: unknown) => e);
      await waitFor(
        async () => /flags=xb .*cmd=xadd/.test(String(await admin.call('CLIENT', 'LIST', 'ID', id))),
        'the first XADD held by the pause',
      );
      await admin.call('CLIENT', 'KILL', 'ID', id);
      outcome = await many;
    } finally {
      await admin.call('CLIENT', 'UNPAUSE');
    }
    // What had no answer (the lone first publish, the GET) is sent again after the reconnect, and answered now.
    const singles = await Promise.all(pending);
    const read = await get;
    await waitFor(() => client.status === 'ready', 'reconnected');
    await waitFor(async () => (await client.ping('x')) === 'x', 'settled');
    // The GET was never answered before the kill: sent again, it must get its own value (or an abort), never an XADD's reply.
    expect(read === 'pause-value' || read instanceof Error).toBe(true);
    await checkAgainstLog(prefix, inputs, outcome);
    const log = await landed(prefix);
    for (const [n, single] of singles.entries()) {
      if (single instanceof Error) continue;
      const entry = log.find(
        (e) => e.offset === (single as { offset: string }).offset && e.partition === (single as { partition: number }).partition,
      );
      expect({ n, data: entry?.data }).toEqual({ n, data: JSON.stringify({ n: 100 + n }) });
    }
    await assertInStep(publisher, 'pause');
  });

  it('READONLY: a server turned into a replica refuses the transaction while queued: nothing appended, all not-appended', async () => {
    const own = await startRedisServer(undefined, ['--dir', mkdtempSync(join(tmpdir(), 'atk-readonly-'))]);
    const onOwn = new Redis(own.url);
    try {
      const prefix = 'atk-readonly';
      const publisher = await publisherOf(prefix, {}, {}, PARTITIONS, own.url);
      await onOwn.call('REPLICAOF', '127.0.0.1', String(server.port));
      await waitFor(async () => /master_link_status:up/.test(await onOwn.info('replication')), 'linked as a replica');
      const inputs: PublishInput[] = Array.from({ length: 30 }, (_, n) => ({ event: 'tx', data: { n }, partition: n % PARTITIONS }));
      const outcome = await publisher.publishMany(inputs).catch((e: unknown) => e);
      expect(outcome).toBeInstanceOf(PublishManyError);
      expect((outcome as PublishManyError).outcomes).toEqual(inputs.map(() => 'not-appended'));
      expect(String((outcome as PublishManyError).cause)).toMatch(/READONLY/);
      await onOwn.call('REPLICAOF', 'NO', 'ONE');
      expect(await landed(prefix, 'tx', PARTITIONS, onOwn)).toEqual([]);
      await assertInStep(publisher, 'readonly', onOwn);
    } finally {
      onOwn.disconnect();
      await own.stop();
    }
  });

  async function calls(name: string): Promise<number> {
    const match = new RegExp(`^cmdstat_${name}:calls=(\\d+)`, 'm').exec(await admin.info('commandstats'));
    return Number(match?.[1] ?? 0);
  }

  /** EXECs that ran a transaction: a discarded one ends with DISCARD and an EXEC Redis refuses (see `LeanTransaction.discard`). */
  async function execsRun(): Promise<number> {
    const match = /^cmdstat_exec:calls=(\d+).*failed_calls=(\d+)/m.exec(await admin.info('commandstats'));
    return Number(match?.[1] ?? 0) - Number(match?.[2] ?? 0);
  }
});

function compareOffsets(a: string, b: string): number {
  const [am, as] = a.split('-').map(BigInt);
  const [bm, bs] = b.split('-').map(BigInt);
  return am === bm ? Number(as - bs) : am < bm ? -1 : 1;
}

function countOf(buffer: Buffer, text: string): number {
  let count = 0;
  for (let i = buffer.indexOf(text); i !== -1; i = buffer.indexOf(text, i + 1)) count++;
  return count;
}

/** One client connection through `CutProxy` and its upstream. */
class CutPair {
  /** Bytes client -> server still forwarded before both sides are destroyed (undefined: no limit). */
  upLimit?: number;
  /** Holds server -> client bytes (in `held`) instead of forwarding them. */
  holdDown = false;
  readonly held: Buffer[] = [];
  constructor(
    readonly client: Socket,
    readonly upstream: Socket,
  ) {}

  /** Forwards the first `count(held)` held bytes to the client, then destroys both sides. */
  releaseDownUntil(count: (held: Buffer) => number): void {
    const all = Buffer.concat(this.held);
    this.client.write(all.subarray(0, count(all)), () => this.destroy());
  }

  destroy(): void {
    this.client.destroy();
    this.upstream.destroy();
  }
}

/** A loopback TCP proxy to Redis that can cut the request stream after N bytes or the reply stream at a chosen byte. */
class CutProxy {
  private readonly pairs = new Set<CutPair>();
  port = 0;
  private constructor(
    private readonly server: Server,
    private readonly target: number,
  ) {}

  static async start(target: number): Promise<CutProxy> {
    const proxy = new CutProxy(
      createServer((client) => proxy.accept(client)),
      target,
    );
    await new Promise<void>((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    proxy.port = (proxy.server.address() as { port: number }).port;
    return proxy;
  }

  /** The pair carrying `redis`'s current connection. */
  pairOf(redis: Redis): CutPair {
    const localPort = (redis as unknown as { stream: Socket }).stream.localPort;
    const pair = [...this.pairs].find((p) => p.client.remotePort === localPort);
    if (!pair) throw new Error(`no proxied connection from port ${localPort}`);
    return pair;
  }

  private accept(client: Socket): void {
    const upstream = new Socket();
    const pair = new CutPair(client, upstream);
    this.pairs.add(pair);
    client.on('data', (chunk: Buffer) => {
      if (pair.upLimit === undefined) return void upstream.write(chunk);
      const part = chunk.subarray(0, pair.upLimit);
      pair.upLimit -= part.length;
      upstream.write(part);
      if (pair.upLimit <= 0) {
        pair.upLimit = undefined;
        upstream.end(() => pair.destroy());
        client.destroy();
      }
    });
    upstream.on('data', (chunk: Buffer) => {
      if (pair.holdDown) pair.held.push(chunk);
      else client.write(chunk);
    });
    const gone = (): void => {
      this.pairs.delete(pair);
      pair.destroy();
    };
    for (const socket of [client, upstream]) {
      socket.on('error', gone);
      socket.on('close', gone);
    }
    upstream.connect(this.target, '127.0.0.1');
  }

  async close(): Promise<void> {
    for (const pair of this.pairs) pair.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
