import { createHash } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailPublisher, PublishInput, PublishManyError } from '../../lib';
import { eventrailAclRules } from '../../lib/redis/acl-rules';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailRedis } from '../../lib/redis/eventrail-redis';
import { ownReplyReaderEnabled, readsWithRespReader } from '../../lib/redis/own-reply-reader';
import { RespReader } from '../../lib/redis/resp-reader';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';

/**
 * Attacks on eventrail's own connection (the one it makes from its `redis`
 * options: every publish, transaction, script, admin call) now read by
 * `RespReader` (own-reply-reader.ts) in place of ioredis's decoder, and on the
 * maintenance notifications that reader hands to ioredis. Everything on that
 * connection must settle as through ioredis's decoder. Every test here must
 * pass with `EVENTRAIL_REPLY_READER=ioredis` too; those that compare the two
 * readers build one app of each (the switch is read when the app is built).
 */
type Reader = 'default' | 'ioredis';

const PARTITIONS = 4;

/** A reply in a form `toEqual` compares (Buffers by content and kind, errors by class and message). */
function comparable(value: unknown): unknown {
  if (Buffer.isBuffer(value)) return `Buffer(${value.length}) ${createHash('sha1').update(value).digest('hex').slice(0, 16)}`;
  if (Array.isArray(value)) return value.map(comparable);
  if (value instanceof Error) return { error: value.message, type: value.constructor.name, name: value.name };
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, comparable(v)]));
  return value;
}

interface Entry {
  partition: number;
  offset: string;
  fields: Record<string, string>;
}

describe('eventrail’s own connection read by RespReader, attacked', () => {
  let server: RedisServer;
  let admin: Redis;
  const apps: INestApplicationContext[] = [];
  const servers: RedisServer[] = [];
  const extraClients: Redis[] = [];

  beforeAll(async () => {
    server = await startRedisServer(undefined, ['--enable-debug-command', 'yes']);
    admin = new Redis(server.url);
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close().catch(() => undefined)));
    for (const client of [admin, ...extraClients]) client?.disconnect();
    await Promise.all([server, ...servers].map((s) => s?.stop()));
  });

  /** An app on `options`; with `reader: 'ioredis'`, built under EVENTRAIL_REPLY_READER=ioredis (else under the process's own setting). */
  const appOn = async (options: Record<string, unknown>, reader: Reader = 'default'): Promise<INestApplicationContext> => {
    const saved = process.env.EVENTRAIL_REPLY_READER;
    if (reader === 'ioredis') process.env.EVENTRAIL_REPLY_READER = 'ioredis';
    try {
      const app = await createApp({ prefix: uniquePrefix('main-attack'), partitions: PARTITIONS, ...options } as never);
      apps.push(app);
      return app;
    } finally {
      if (saved === undefined) delete process.env.EVENTRAIL_REPLY_READER;
      else process.env.EVENTRAIL_REPLY_READER = saved;
    }
  };
  const clientOf = (app: INestApplicationContext): Redis => app.get(EventrailRedis).client as Redis;
  const internals = (client: Redis): { stream: NodeJS.EventEmitter; maintenanceManager?: { isWritePaused(): boolean } } =>
    client as unknown as { stream: NodeJS.EventEmitter; maintenanceManager?: { isWritePaused(): boolean } };

  /** Every entry of the log at `prefix`, per partition in stream order. */
  async function logOf(prefix: string, on: Redis = admin, partitions = PARTITIONS): Promise<Entry[]> {
    const keys = new EventrailKeys(prefix, partitions);
    const found: Entry[] = [];
    for (let p = 0; p < partitions; p++) {
      if ((await on.type(keys.stream(p))) !== 'stream') continue;
      for (const [offset, list] of await on.xrange(keys.stream(p), '-', '+')) {
        const fields: Record<string, string> = {};
        for (let i = 0; i + 1 < list.length; i += 2) fields[list[i]] = list[i + 1];
        found.push({ partition: p, offset, fields });
      }
    }
    return found;
  }

  /** Replies on `client` still belong to their own commands (the value written through `on`, a client of its server). */
  async function assertInStep(client: Redis, tag: string, base = 'in-step', on: Redis = admin): Promise<void> {
    await on.set(`${base}:${tag}`, `value-${tag}`);
    const got = await Promise.all([
      client.get(`${base}:${tag}`),
      client.ping(`ping-${tag}`),
      client.exists(`${base}:${tag}`, `${base}:none`),
    ]);
    expect(got).toEqual([`value-${tag}`, `ping-${tag}`, 1]);
  }

  it('reads its own connection with RespReader unless EVENTRAIL_REPLY_READER=ioredis; never the application’s own client, even after reconnects', async () => {
    const own = await appOn({ redis: server.url });
    expect(readsWithRespReader(clientOf(own))).toBe(ownReplyReaderEnabled());
    const given = new Redis(server.url);
    extraClients.push(given);
    const adopted = await appOn({ redis: given });
    expect(clientOf(adopted)).toBe(given);
    for (let round = 0; round < 3; round++) {
      const [ownId, givenId] = [await clientOf(own).client('ID'), await given.client('ID')];
      await admin.call('CLIENT', 'KILL', 'ID', String(ownId));
      await admin.call('CLIENT', 'KILL', 'ID', String(givenId));
      await waitFor(async () => clientOf(own).status === 'ready' && (await clientOf(own).client('ID')) !== ownId, 'own reconnected');
      await waitFor(async () => given.status === 'ready' && (await given.client('ID')) !== givenId, 'given reconnected');
      expect({ round, own: readsWithRespReader(clientOf(own)), given: readsWithRespReader(given) }).toEqual({
        round,
        own: ownReplyReaderEnabled(),
        given: false,
      });
      const published = await adopted.get(EventrailPublisher).publish('adopted', { round });
      const [last] = await admin.xrevrange(adopted.get(EventrailRedis).keys.stream(published.partition), '+', '-', 'COUNT', 1);
      expect(last[0]).toBe(published.offset);
      await assertInStep(clientOf(own), `adopt-${round}`);
    }
  });

  // ---------------------------------------------------------------------------------------------
  // ioredis 6.1 maintenance notifications handed to ioredis by the reader
  // ---------------------------------------------------------------------------------------------

  it('completes a Smart Client Handoff (MOVING) while a command is in flight, as through ioredis’s decoder', async () => {
    // Redis Enterprise and Redis Cloud send MOVING <seq> <seconds> <endpoint> before moving the connection's
    // endpoint; ioredis then pauses writes, waits for the replies still due on the old socket (its decoder's
    // queue-drained signal), adopts a socket to the endpoint and resumes. The frame is put on the live socket
    // as the server would write it (a Redis of our own never sends it); the endpoint is the same server.
    const app = await appOn({ redis: { host: '127.0.0.1', port: server.port } });
    const publisher = app.get(EventrailPublisher);
    await publisher.publish('before.moving', { n: 0 });
    const client = clientOf(app);
    const before = internals(client).stream;
    const endpoint = `127.0.0.1:${server.port}`;
    const inFlight = client.ping('in flight');
    before.emit('data', Buffer.from(`>4\r\n$6\r\nMOVING\r\n:1\r\n:30\r\n$${endpoint.length}\r\n${endpoint}\r\n`));
    expect(await inFlight).toBe('in flight');
    // The publish after it waits in the paused offline queue until the handoff is done: at once through
    // ioredis's decoder, not after the 30 s grace period.
    let outcome: string | undefined;
    const started = Date.now();
    publisher.publish('after.moving', { n: 1 }).then(
      () => (outcome = `published after ${Date.now() - started} ms`),
      (error: Error) => (outcome = `failed after ${Date.now() - started} ms: ${error.message}`),
    );
    await waitFor(
      () => outcome !== undefined,
      () => `the publish after MOVING to settle (writes still paused: ${String(internals(client).maintenanceManager?.isWritePaused())})`,
      5_000,
    );
    expect(outcome).toMatch(/^published/);
    expect(internals(client).stream).not.toBe(before);
    await assertInStep(client, 'moving');
  });

  /**
   * Puts `frames` on `client`'s socket between the replies the server sends it (after reply number `at`
   * of the ones counted from now), each frame cut in two chunks, and the server's own chunks cut in two as well.
   */
  function spliceBetweenReplies(client: Redis, frames: Map<number, Buffer>): () => void {
    const stream = internals(client).stream as NodeJS.EventEmitter & { emit(event: string, ...args: unknown[]): boolean };
    const original = stream.emit;
    let replies = 0;
    let pending: number | undefined;
    const tracker = new RespReader(() => replies++, { ioredis: false, error: (m) => new Error(m), onPush: () => undefined });
    stream.emit = function (this: unknown, event: string, ...args: unknown[]): boolean {
      if (event !== 'data') return original.call(stream, event, ...args);
      const chunk = args[0] as Buffer;
      let from = 0;
      for (let i = 0; i < chunk.length; i++) {
        const was = replies;
        tracker.write(chunk.subarray(i, i + 1));
        if (replies !== was) pending = replies;
        // A bulk string is a reply before its CRLF is read: the boundary is after it.
        const frame = pending !== undefined && (tracker as unknown as { skip: number }).skip === 0 ? frames.get(pending) : undefined;
        if (pending !== undefined && (tracker as unknown as { skip: number }).skip === 0) pending = undefined;
        if (frame) {
          const piece = chunk.subarray(from, i + 1);
          const half = Math.ceil(piece.length / 2);
          original.call(stream, 'data', piece.subarray(0, half));
          if (piece.length > half) original.call(stream, 'data', piece.subarray(half));
          const cut = Math.floor(frame.length / 2);
          original.call(stream, 'data', frame.subarray(0, cut));
          original.call(stream, 'data', frame.subarray(cut));
          from = i + 1;
        }
      }
      if (from < chunk.length) original.call(stream, 'data', chunk.subarray(from));
      return true;
    } as typeof stream.emit;
    return () => void (stream.emit = original);
  }

  it('maintenance notifications between pipelined replies, cut across chunks, malformed, mixed with other pushes: same replies and notifications as ioredis’s decoder', async () => {
    const frames = new Map<number, Buffer>([
      [2, Buffer.from('>4\r\n$9\r\nMIGRATING\r\n:21\r\n:15\r\n$5\r\n["1"]\r\n')],
      // Malformed: no time, an endpoint that is no endpoint, a sequence that is no number, an empty push, a nested type.
      [
        4,
        Buffer.from(
          '>2\r\n$6\r\nMOVING\r\n:22\r\n>4\r\n$6\r\nMOVING\r\n:23\r\n:9\r\n$11\r\nnot an addr\r\n>2\r\n$8\r\nMIGRATED\r\n$1\r\nx\r\n>0\r\n',
        ),
      ],
      [5, Buffer.from('>2\r\n*1\r\n$6\r\nMOVING\r\n:24\r\n>2\r\n:7\r\n:25\r\n')],
      [7, Buffer.from('>2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nkey\r\n>3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nmsg\r\n')],
      [9, Buffer.from('>3\r\n$12\r\nFAILING_OVER\r\n:26\r\n:5\r\n>2\r\n$11\r\nFAILED_OVER\r\n:27\r\n')],
      [11, Buffer.from('>3\r\n$8\r\nMIGRATED\r\n:28\r\n$9\r\n["1","2"]\r\n')],
    ]);
    const seen: unknown[] = [];
    const onNotification = (notification: unknown): void => void seen.push(notification);
    const run = async (reader: Reader): Promise<{ replies: unknown; notifications: unknown[]; published: number }> => {
      const app = await appOn({ redis: server.url }, reader);
      const client = clientOf(app);
      await admin.set('maint:big', 'b'.repeat(100_000));
      await client.ping();
      seen.length = 0;
      const restore = spliceBetweenReplies(client, frames);
      diagnostics.subscribe('ioredis:maintenance', onNotification);
      let replies: unknown;
      try {
        replies = comparable(
          await Promise.all([
            client.ping('a'),
            client.getBuffer('maint:big'),
            client.incrby('maint:n', 0).then(() => 'counted'),
            client.call('DEBUG', 'PROTOCOL', 'map'),
            client.strlen('maint:big'),
            client.call('DEBUG', 'PROTOCOL', 'double'),
            client.get('maint:none'),
            client.call('DEBUG', 'PROTOCOL', 'attrib'),
            client.call('NOSUCHCOMMAND').catch((error: Error) => error),
            client.call('DEBUG', 'PROTOCOL', 'verbatim'),
            client.xlen('maint:nostream'),
            client.ping('b'),
            client.ping('c'),
          ]),
        );
      } finally {
        diagnostics.unsubscribe('ioredis:maintenance', onNotification);
        restore();
      }
      const published = (
        await app.get(EventrailPublisher).publishMany(Array.from({ length: 20 }, (_, n) => ({ event: 'maint', data: { n } })))
      ).length;
      await assertInStep(client, `maint-${reader}`);
      return { replies, notifications: seen.map((n) => comparable(n)), published };
    };
    const theirs = await run('ioredis');
    const mine = await run('default');
    expect(mine).toEqual(theirs);
    expect((theirs.notifications as Array<{ type: string }>).map((n) => n.type)).toEqual([
      'MIGRATING',
      'FAILING_OVER',
      'FAILED_OVER',
      'MIGRATED',
    ]);
  });

  it('a push the server itself sends between pipelined replies (CLIENT TRACKING invalidations) on its own connection: every command gets its own reply', async () => {
    const app = await appOn({ redis: server.url });
    const client = clientOf(app);
    await client.call('CLIENT', 'TRACKING', 'ON');
    try {
      for (let round = 0; round < 20; round++) {
        // Reading a key tracks it; writing it (here, on the same connection) sends the invalidation push at once.
        const key = `tracked:${round % 3}`;
        const replies = await Promise.all([
          client.get(key),
          client.set(key, `v${round}`),
          client.get(key),
          client.incr(`tracked:n${round % 2}`).then(() => 'incr'),
          client.get(key),
          client.ping(`t${round}`),
          app
            .get(EventrailPublisher)
            .publish('tracked', { round })
            .then(() => 'published'),
        ]);
        expect(replies.slice(1)).toEqual(['OK', `v${round}`, 'incr', `v${round}`, `t${round}`, 'published']);
      }
    } finally {
      await client.call('CLIENT', 'TRACKING', 'OFF');
    }
    await assertInStep(client, 'tracking');
  });

  // ---------------------------------------------------------------------------------------------
  // Errors read by the reader: what they carry
  // ---------------------------------------------------------------------------------------------

  it('never puts the password of its options in a handshake’s refusal, as ioredis’s decoder does not', async () => {
    const secured = await startRedisServer();
    servers.push(secured);
    const setup = new Redis(secured.url);
    await setup.config('SET', 'requirepass', 'the-right-one');
    setup.disconnect();
    const secret = 'not-the-right-one-s3cr3t';
    let failure: unknown;
    await createApp({
      redis: { host: '127.0.0.1', port: secured.port, password: secret, retryStrategy: () => null },
      prefix: uniquePrefix('main-attack'),
      startupTimeoutMs: 1_500,
    } as never).then(
      (app) => apps.push(app),
      (error: unknown) => (failure = error),
    );
    expect(failure).toBeDefined();
    // What a startup failure prints (Nest's bootstrap, a logger that inspects errors): the cause and what it carries.
    const shown = inspect(failure, { depth: 20 });
    expect(shown).toMatch(/WRONGPASS/);
    expect(shown).not.toContain(secret);
  });

  it('replies and errors on its own connection (every DEBUG PROTOCOL type, XINFO FULL, HELLO, a transaction, errors by class, message and command) equal ioredis’s decoder’s', async () => {
    const prefix = uniquePrefix('main-attack');
    const theirs = clientOf(await appOn({ redis: server.url, prefix }, 'ioredis'));
    const mine = clientOf(await appOn({ redis: server.url, prefix }));
    const keys = new EventrailKeys(prefix, PARTITIONS);
    await admin.xadd(keys.stream(0), '*', 'event', 'x', 'data', '{"a":"\\r\\n"}');
    await admin.zadd('types:z', '1.5', 'm');
    const calls: Array<[string, ...Array<string | number>]> = [
      ...['string', 'integer', 'double', 'bignum', 'null', 'array', 'set', 'map', 'attrib', 'push', 'verbatim', 'true', 'false'].map(
        (t) => ['DEBUG', 'PROTOCOL', t] as [string, string, string],
      ),
      ['XINFO', 'STREAM', keys.stream(0), 'FULL'],
      ['HELLO', '3'],
      ['ZSCORE', 'types:z', 'm'],
      ['ZRANGE', 'types:z', '0', '-1', 'WITHSCORES'],
      ['OBJECT', 'ENCODING', keys.stream(0)],
      ['XADD', 'types:z', '*', 'a', 'b'],
      ['EVAL', "return redis.error_reply('MY custom\\nerror')", '0'],
      ['EVAL', "return {1, 'two', {err='inner'}, {ok='fine'}, false, true}", '0'],
      ['MULTI'],
      ['INCR', 'types:z'],
      ['SET', 'types:s', '1'],
      ['EXEC'],
      ['MEMORY', 'DOCTOR'],
    ];
    const run = (client: Redis, buffers: boolean): Promise<unknown[]> =>
      Promise.all(
        calls.map(([name, ...args]) =>
          (buffers ? client.callBuffer(name, ...args) : client.call(name, ...args)).then(
            (value) => ({ value: name === 'XADD' || name === 'HELLO' ? typeof value : comparable(value) }),
            (error: Error) => ({ error: comparable(error), command: comparable((error as { command?: unknown }).command) }),
          ),
        ),
      );
    for (const buffers of [false, true]) {
      await admin.del('types:s');
      const a = await run(theirs, buffers);
      await admin.del('types:s');
      const b = await run(mine, buffers);
      expect(b).toEqual(a);
    }
    await assertInStep(mine, 'types');
  });

  // ---------------------------------------------------------------------------------------------
  // Publishing through faults: each appended event in the log once, none refused there
  // ---------------------------------------------------------------------------------------------

  /** Checks each input's outcome against the log by event id: appended once at its offset, not-appended absent, unknown at most once. */
  function checkOutcomes(
    log: Entry[],
    inputs: PublishInput[],
    outcome: unknown,
    tag: string,
  ): { unknown: PublishInput[]; appended: number } {
    const byId = new Map<string, Entry[]>();
    for (const entry of log) byId.set(entry.fields.id, [...(byId.get(entry.fields.id) ?? []), entry]);
    const outcomes: string[] =
      outcome instanceof PublishManyError
        ? [...outcome.outcomes]
        : Array.isArray(outcome)
          ? inputs.map(() => 'appended')
          : inputs.map(() => 'unknown');
    const results = outcome instanceof PublishManyError ? outcome.results : Array.isArray(outcome) ? outcome : [];
    const wrong: string[] = [];
    const unknown: PublishInput[] = [];
    let appended = 0;
    for (const [i, input] of inputs.entries()) {
      const copies = byId.get(input.id as string) ?? [];
      const result = results[i] as { offset: string; partition: number } | undefined;
      if (outcomes[i] === 'appended') {
        appended++;
        if (copies.length !== 1 || copies[0].offset !== result?.offset || copies[0].partition !== result?.partition)
          wrong.push(
            `${tag} ${String(input.id)}: appended at ${result?.partition}/${result?.offset}, log has ${copies.map((c) => `${c.partition}/${c.offset}`).join(',') || 'nothing'}`,
          );
      } else if (outcomes[i] === 'not-appended') {
        if (copies.length !== 0) wrong.push(`${tag} ${String(input.id)}: not appended, log has ${copies.length}`);
      } else {
        if (copies.length > 1) wrong.push(`${tag} ${String(input.id)}: unknown, log has ${copies.length}`);
        unknown.push(input);
      }
    }
    expect(wrong).toEqual([]);
    return { unknown, appended };
  }

  it('publishMany of 1500 with ids and big entries, and publish() callers, through SIGKILL and a restart of the server on its port and CLIENT KILL: each appended event once, none refused there', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'main-attack-aof-'));
    const args = ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir];
    let node = await startRedisServer(undefined, args);
    const port = node.port;
    const prefix = uniquePrefix('main-attack-kill');
    const watch = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 50 });
    watch.on('error', () => undefined);
    const killer = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 50 });
    killer.on('error', () => undefined);
    try {
      const app = await appOn({ redis: { host: '127.0.0.1', port }, prefix, dedupWindowMs: 600_000, publishTimeoutMs: 8_000 });
      const publisher = app.get(EventrailPublisher);
      const client = clientOf(app);
      const random = seededRandom(41);
      let appended = 0;
      let hit = 0;
      // At least 6 rounds, and more (up to 16) until the faults have reached publishes on their way in 3: how soon a
      // fault lands after the publishes leave depends on the host's load.
      for (let round = 0; round < 16 && (round < 6 || hit < 3); round++) {
        await waitFor(() => client.status === 'ready', 'ready');
        const inputs: PublishInput[] = Array.from({ length: 1500 }, (_, n) => ({
          event: 'kill',
          id: `r${round}-${n}`,
          key: `k${n % 13}`,
          data: { round, n, pad: n % 250 === 7 ? 'B\r\n'.repeat(7_000) : 'p'.repeat(n % 40) },
        }));
        const singles: PublishInput[] = Array.from({ length: 60 }, (_, n) => ({
          event: 'kill',
          id: `s${round}-${n}`,
          key: `k${n % 5}`,
          data: { n },
        }));
        const id = String(await client.client('ID'));
        const many = publisher.publishMany(inputs).catch((error: unknown) => error);
        const single = singles.map((input) =>
          publisher.publish(input.event as string, input.data, { id: input.id, key: input.key }).then(
            (result) => [result],
            (error: unknown) => error,
          ),
        );
        // Odd rounds: the server is killed and started again on its port, its AOF kept; even rounds: the connection
        // is killed. Both while the publishes are on their way: in the first six rounds in the tick they leave in
        // (on a loaded host a timer of a few ms fired after every publish had been answered, in all 16 rounds; a
        // server killed in that tick cannot have answered 1500 events), after that a few ms after they leave.
        if (round >= 6) await new Promise((resolve) => setTimeout(resolve, 1 + Math.floor(random() * 8)));
        if (round % 2 === 1) {
          await node.stop('SIGKILL');
          node = await startRedisServer(port, args);
        } else await killer.call('CLIENT', 'KILL', 'ID', id).catch(() => undefined);
        const outcome = await many;
        const singleOutcomes = await Promise.all(single);
        await waitFor(async () => (await watch.ping()) === 'PONG', 'the server answers');
        // Anything still on its way (a resend after the reconnect) lands before the check.
        await waitFor(() => client.status === 'ready', 'reconnected');
        await client.ping();
        let log = await logOf(prefix, watch);
        const first = checkOutcomes(log, inputs, outcome, `round ${round} many`);
        if (outcome instanceof Error || singleOutcomes.some((o) => o instanceof Error)) hit++;
        const unknownSingles = singles.filter(
          (input, i) => checkOutcomes(log, [input], singleOutcomes[i], `round ${round} single`).unknown.length > 0,
        );
        appended += first.appended;
        // Those not known to be appended are sent again with their ids: producer dedup makes each land once.
        const again = [...inputs, ...singles].filter(
          (input) => ![...first.unknown, ...unknownSingles].includes(input) && !log.some((e) => e.fields.id === input.id),
        );
        const retry = [...first.unknown, ...unknownSingles, ...again];
        if (retry.length > 0) await publisher.publishMany(retry);
        log = await logOf(prefix, watch);
        const count = new Map<string, number>();
        for (const entry of log) count.set(entry.fields.id, (count.get(entry.fields.id) ?? 0) + 1);
        const notOnce = [...inputs, ...singles]
          .filter((input) => count.get(input.id as string) !== 1)
          .map((input) => `${String(input.id)} x${count.get(input.id as string) ?? 0}`);
        expect({ round, notOnce }).toEqual({ round, notOnce: [] });
      }
      expect(appended).toBeGreaterThan(0);
      // How many rounds a fault reached publishes on their way in depends on the host: 3 or more of 6 here, but 1 of
      // 16 in a loaded CI lane (a publishMany after a reconnect may wait for an answer before it writes, and the
      // fault then lands before anything was written). Said, not asserted: each round's outcomes are checked above.
      if (hit < 3) console.log(`own-reader kill rounds: faults reached publishes in flight in ${hit} of the rounds`);
      // The app's connection is on this test's own server: the value is written there.
      await assertInStep(client, 'kill', 'in-step', watch);
    } finally {
      watch.disconnect();
      killer.disconnect();
      await node.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // ---------------------------------------------------------------------------------------------
  // Refusals: OOM, ACL (no MULTI, no XADD, no EVALSHA), NOSCRIPT after SCRIPT FLUSH
  // ---------------------------------------------------------------------------------------------

  it('refusals (OOM, ACL without MULTI / XADD / EVALSHA, SCRIPT FLUSH) settle as through ioredis’s decoder, and nothing refused lands', async () => {
    const run = async (reader: Reader): Promise<unknown> => {
      const prefix = uniquePrefix(`refuse-${reader}`);
      const rules = eventrailAclRules(prefix);
      const report: Record<string, unknown> = {};
      // Redis 7.2+ and Valkey name the ACL user in a NOPERM refusal, and each run has a user of its own.
      const userless = (message: string | undefined): string | undefined => message?.replace(/User \S+ has/g, 'User <user> has');
      const describe = (value: unknown): unknown =>
        value instanceof PublishManyError
          ? {
              outcomes: [...new Set(value.outcomes)],
              cause: (value.cause as Error)?.constructor.name,
              causeMessage: userless((value.cause as Error)?.message),
            }
          : value instanceof Error
            ? { error: value.constructor.name, message: userless(value.message.replace(/\d+ ms/g, 'N ms')) }
            : Array.isArray(value)
              ? `${value.length} results`
              : 'result';
      const inputs = (tag: string, ids = false): PublishInput[] =>
        Array.from({ length: 30 }, (_, n) => ({
          event: tag,
          data: { n },
          partition: n % PARTITIONS,
          ...(ids ? { id: `${tag}-${n}` } : {}),
        }));
      // OOM on the default user.
      const full = await appOn({ redis: server.url, prefix }, reader);
      const publisher = full.get(EventrailPublisher);
      await publisher.publishMany(inputs('warm'));
      await admin.config('SET', 'maxmemory', '1');
      try {
        report.oomMany = describe(await publisher.publishMany(inputs('oom')).catch((e: unknown) => e));
        report.oomManyIds = describe(await publisher.publishMany(inputs('oomid', true)).catch((e: unknown) => e));
        report.oomOne = describe(await publisher.publish('oom1', { n: 1 }).catch((e: unknown) => e));
      } finally {
        await admin.config('SET', 'maxmemory', '0');
      }
      // SCRIPT FLUSH: the scripts are loaded again and everything appends.
      await admin.script('FLUSH');
      report.afterFlush = describe(await publisher.publishMany(inputs('flush', true)).catch((e: unknown) => e));
      report.afterFlushOne = describe(await publisher.publish('flush1', { n: 1 }, { id: 'f1' }).catch((e: unknown) => e));
      report.afterFlushPlain = describe(await publisher.publishMany(inputs('flushplain')).catch((e: unknown) => e));
      // ACL users that lack one command each.
      for (const lacking of ['multi', 'xadd', 'evalsha']) {
        const user = `${prefix}-no-${lacking}`;
        await admin.call(
          'ACL',
          'SETUSER',
          user,
          'reset',
          'on',
          '>pw',
          ...rules.full.split(' '),
          ...rules.optional.split(' '),
          `-${lacking}`,
        );
        const limited = await appOn({ redis: { host: '127.0.0.1', port: server.port, username: user, password: 'pw' }, prefix }, reader);
        const pub = limited.get(EventrailPublisher);
        report[`no-${lacking}-many`] = describe(await pub.publishMany(inputs(`acl${lacking}`)).catch((e: unknown) => e));
        report[`no-${lacking}-many-again`] = describe(await pub.publishMany(inputs(`acl2${lacking}`)).catch((e: unknown) => e));
        report[`no-${lacking}-ids`] = describe(await pub.publishMany(inputs(`aclid${lacking}`, true)).catch((e: unknown) => e));
        report[`no-${lacking}-one`] = describe(await pub.publish(`acl1${lacking}`, { n: 1 }).catch((e: unknown) => e));
        await assertInStep(clientOf(limited), `acl-${lacking}-${reader}`, `${prefix}:in-step`);
      }
      // What landed, per event name (a refused event never).
      const landed = new Map<string, number>();
      for (const entry of await logOf(prefix)) landed.set(entry.fields.event, (landed.get(entry.fields.event) ?? 0) + 1);
      report.landed = Object.fromEntries([...landed].sort());
      await assertInStep(clientOf(full), `refuse-${reader}`);
      return report;
    };
    const theirs = await run('ioredis');
    const mine = await run('default');
    expect(mine).toEqual(theirs);
    expect((theirs as { oomMany: unknown }).oomMany).toMatchObject({ cause: 'RedisFullError' });
  });

  // ---------------------------------------------------------------------------------------------
  // The user's connection options
  // ---------------------------------------------------------------------------------------------

  it('the user’s options (db, keyPrefix, protocol 2, stringNumbers, resp3 mapping, reconnectOnError, commandTimeout): the decoder is kept where it must be, results are right, across reconnects', async () => {
    const resent: string[] = [];
    const configs: Array<[string, Record<string, unknown>, boolean]> = [
      ['db3', { db: 3 }, true],
      ['keyprefix', { keyPrefix: 'kp:' }, true],
      ['resp2', { protocol: 2 }, true],
      ['lazy-autopipe', { lazyConnect: true, enableAutoPipelining: true, connectionName: 'main-attack', socketTimeout: 2_000 }, true],
      ['stringnumbers', { stringNumbers: true }, false],
      // eventrail's own connections keep the 'legacy' mapping whatever the options say, so its reader reads them.
      ['resp3map', { protocol: 3, replyMapping: 'resp3' }, true],
      [
        'reconnect',
        {
          commandTimeout: 3_000,
          reconnectOnError: (error: Error) => {
            resent.push(error.message);
            return /^ERR-RESEND/.test(error.message) ? 2 : false;
          },
        },
        true,
      ],
    ];
    for (const [name, options, ours] of configs) {
      const prefix = uniquePrefix(`opt-${name}`);
      const app = await appOn({ redis: { host: '127.0.0.1', port: server.port, ...options }, prefix });
      const client = clientOf(app);
      const on = new Redis(server.url, { db: (options.db as number | undefined) ?? 0, keyPrefix: options.keyPrefix as string | undefined });
      try {
        for (let round = 0; round < 2; round++) {
          expect({ name, round, reads: readsWithRespReader(client) }).toEqual({ name, round, reads: ours && ownReplyReaderEnabled() });
          const publisher = app.get(EventrailPublisher);
          const inputs: PublishInput[] = Array.from({ length: 40 }, (_, n) => ({
            event: 'opt',
            data: { name, round, n },
            key: `k${n % 7}`,
          }));
          const results = await publisher.publishMany(inputs);
          const one = await publisher.publish('opt', { name, round, n: 'one' }, { key: 'k1' });
          const log = await logOf(prefix, on);
          for (const [i, result] of [...results, one].entries()) {
            const entry = log.find((e) => e.partition === result.partition && e.offset === result.offset);
            expect({ name, i, data: entry?.fields.data }).toEqual({
              name,
              i,
              data: JSON.stringify(i < 40 ? inputs[i].data : { name, round, n: 'one' }),
            });
          }
          // Under replyMapping 'resp3' in the options too (stats() had read no entries there: XINFO answered as an object).
          const stats = await app.get(EventrailAdmin).stats();
          expect({
            name,
            total: (stats as unknown as { partitions: Array<{ length: number }> }).partitions.reduce((sum, p) => sum + p.length, 0),
          }).toEqual({
            name,
            total: 41 * (round + 1),
          });
          // An error reply goes through the user's reconnectOnError (with the message as Redis sent it).
          const failed = await client.eval("return redis.error_reply('ERR-NOT-RESENT " + name + "')", 0).catch((error: Error) => error);
          expect({ name, failed: comparable(failed) }).toMatchObject({ name, failed: { error: `ERR-NOT-RESENT ${name}` } });
          const id = await client.client('ID');
          await admin.call('CLIENT', 'KILL', 'ID', String(id));
          await waitFor(async () => client.status === 'ready' && (await client.client('ID')) !== id, `${name} reconnected`);
        }
      } finally {
        on.disconnect();
      }
    }
    expect(resent.filter((m) => m.startsWith('ERR-NOT-RESENT reconnect'))).toHaveLength(2);
  });

  // ---------------------------------------------------------------------------------------------
  // Admin API on the main connection
  // ---------------------------------------------------------------------------------------------

  it('the admin API on its own connection answers as through ioredis’s decoder', async () => {
    const prefix = uniquePrefix('main-attack-admin');
    const theirs = await appOn({ redis: server.url, prefix }, 'ioredis');
    const mine = await appOn({ redis: server.url, prefix });
    await mine.get(EventrailPublisher).publishMany(
      Array.from({ length: 120 }, (_, n) => ({
        event: 'admin',
        data: { n, s: n % 30 === 0 ? 'é\r\n'.repeat(9_000) : '' },
        key: `k${n % 9}`,
        id: `a${n}`,
      })),
    );
    const ask = async (app: INestApplicationContext): Promise<unknown> => {
      const adminApi = app.get(EventrailAdmin);
      const strip = (value: unknown): unknown =>
        JSON.parse(JSON.stringify(value, (k, v: unknown) => (/ms$|Ms$|At$|latency|time|memory|Memory|used/i.test(k) ? '*' : v)));
      return {
        stats: strip(await adminApi.stats()),
        nodes: strip(await adminApi.nodes()),
        groups: strip(await adminApi.groups()),
        policies: strip(await adminApi.evictionPolicies()),
        log: strip(await adminApi.readLog(0, { count: 50 } as never)),
        entry: strip(await adminApi.logEntry(1, '0-1')),
        status: adminApi.connectionStatus(),
      };
    };
    expect(await ask(mine)).toEqual(await ask(theirs));
  });
});
