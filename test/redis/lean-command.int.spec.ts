import Redis, { Command, ReplyError } from 'ioredis';
import { LEAN_INTERNALS, leanCommandsSupported, missingLeanInternals, sendLean, sendLeanScript } from '../../lib/redis/lean-command';
import { leanScript } from '../../lib/redis/scripts';
import { RedisServer, startRedisServer } from '../support/redis-server';
import { seededRandom } from '../support/seeded-random';

type Field = string | Buffer;
type XReadBuffers = Array<[Buffer, Array<[Buffer, Buffer[]]>]> | null;

/**
 * The hot path's commands (a worker's XREAD, a publish's XADD, the commit and
 * backlog scripts) go through `LeanCommand`, which replaces how ioredis
 * settles a command's promise. It must answer exactly as ioredis's own
 * methods do: the same replies, the same errors, timeouts, key prefixes, and
 * scripts the server does not have yet. Against a server of its own (the
 * test flushes its scripts).
 */
describe('lean commands', () => {
  let server: RedisServer;
  let redis: Redis;

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });

  it('is in use with the installed ioredis (not the plain-command fallback)', () => {
    expect(leanCommandsSupported).toBe(true);
  });

  // The day an ioredis release renames or drops what LeanCommand relies on, these fail and name it;
  // the facade then falls back to ioredis's own commands (test/redis/eventrail-scripts.int.spec.ts runs both).
  it('finds every ioredis internal it uses on the installed Command', () => {
    expect(LEAN_INTERNALS.length).toBeGreaterThan(0);
    expect(missingLeanInternals()).toEqual([]);
  });

  it('finds the fields of ioredis’s Command it reads and writes, as its constructor leaves them', () => {
    const command = new Command('xadd', ['s', '*', 'f', 1]) as unknown as Record<string, unknown>;
    expect(command).toMatchObject({ name: 'xadd', isResolved: false, transformed: true });
    expect(typeof command.resolve).toBe('function');
    expect(typeof command.reject).toBe('function');
    expect(command.promise).toBeInstanceOf(Promise);
    expect('isSettled' in command || command.isSettled === undefined).toBe(true);
    // stringifyArguments turns numbers into strings in place: LeanCommand calls it for the same.
    expect(command.args).toEqual(['s', '*', 'f', '1']);
    // The argument transformers (HSET's object form, ...) that LeanCommand applies as ioredis does.
    const transformers = (Command as unknown as { _transformer?: { argument?: Record<string, unknown> } })._transformer;
    expect(typeof transformers?.argument?.hset).toBe('function');
    command.promise = (command.promise as Promise<unknown>).catch(() => undefined);
  });

  it('appends and reads generated entries exactly as ioredis’s own XADD and XREAD do, as strings and as Buffers', async () => {
    const random = seededRandom(13);
    const pick = (n: number): number => Math.floor(random() * n);
    const value = (): Field => {
      switch (pick(4)) {
        case 0:
          return Buffer.from(Array.from({ length: pick(60) }, () => pick(256)));
        case 1:
          return 'ü✓🙂'.repeat(pick(20));
        case 2:
          return String(pick(1_000_000));
        default:
          return '';
      }
    };
    for (let i = 0; i < 300; i++) {
      const fields: Field[] = [];
      for (let f = 1 + pick(4); f > 0; f--) fields.push(`f${pick(10)}`, value());
      const [lean, own] = [`lean-${i % 3}`, `own-${i % 3}`];
      const leanId = await sendLean<string>(redis, 'xadd', [lean, '*', ...fields]);
      const ownId = await redis.xadd(own, '*', ...fields);
      expect(leanId).toMatch(/^\d+-\d+$/);
      expect(ownId).toMatch(/^\d+-\d+$/);
    }
    for (let s = 0; s < 3; s++) {
      const leanAsBuffers = await sendLean<XReadBuffers>(redis, 'xread', ['COUNT', 500, 'STREAMS', `lean-${s}`, '0-0'], true);
      const ownAsBuffers = (await redis.xreadBuffer('COUNT', 500, 'STREAMS', `own-${s}`, '0-0')) as XReadBuffers;
      const fieldsOf = (reply: XReadBuffers): Buffer[][] => (reply?.[0][1] ?? []).map(([, f]) => f);
      expect(fieldsOf(leanAsBuffers)).toEqual(fieldsOf(ownAsBuffers));
      expect(leanAsBuffers?.[0][0]).toEqual(Buffer.from(`lean-${s}`));
      expect(fieldsOf(leanAsBuffers).length).toBe(100);

      const leanAsStrings = await sendLean<Array<[string, Array<[string, string[]]>]>>(redis, 'xread', ['STREAMS', `lean-${s}`, '0-0']);
      const ownAsStrings = await redis.xread('STREAMS', `own-${s}`, '0-0');
      expect(leanAsStrings[0][1].map(([, f]) => f)).toEqual(ownAsStrings?.[0][1].map(([, f]) => f));
    }
    // A blocking read that times out answers null, as ioredis's own does.
    expect(await sendLean(redis, 'xread', ['BLOCK', 20, 'STREAMS', 'nothing-here', '$'], true)).toBeNull();
  });

  it('rejects with the ReplyError ioredis’s own method gives', async () => {
    await redis.set('a-string', 'x');
    const own = await redis.xadd('a-string', '*', 'f', 'v').catch((error: unknown) => error);
    const lean = await sendLean(redis, 'xadd', ['a-string', '*', 'f', 'v']).catch((error: unknown) => error);
    expect(lean).toBeInstanceOf(ReplyError);
    expect((lean as Error).message).toBe((own as Error).message);
    expect((lean as Error).message).toMatch(/^WRONGTYPE/);
  });

  it('sends a script as EVAL on a socket that has not had it, so what is written after it cannot overtake it', async () => {
    const appendMany = leanScript('eventrailAppendMany');
    // A server without the script and a new socket: what a restart leaves.
    await redis.script('FLUSH');
    const fresh = new Redis(server.url);
    try {
      await fresh.ping();
      for (let round = 0; round < 2; round++) {
        const stream = `ordered-${round}`;
        // One write: a run of two appends, then a plain append to the same stream.
        const run = sendLeanScript<[string[]]>(fresh, appendMany, [stream, 2, '', 'n', '1', 'n', '2'], false, 1);
        const after = sendLean<string>(fresh, 'xadd', [stream, '*', 'n', '3']);
        const [[offsets], last] = await Promise.all([run, after]);
        const entries = await redis.xrange(stream, '-', '+');
        expect(entries.map(([, fields]) => fields[1])).toEqual(['1', '2', '3']);
        expect(entries.map(([offset]) => offset)).toEqual([...offsets, last]);
      }
      expect(await redis.script('EXISTS', appendMany.sha)).toEqual([1]);
    } finally {
      fresh.disconnect();
    }
  });

  it('runs a script the server lost under a live socket (NOSCRIPT) by sending it again as EVAL, then by its SHA', async () => {
    const script = leanScript('eventrailReleaseLock');
    await redis.set('lock', 'token-1');
    // releaseLock-1.lua: deletes the lock only while it holds this token.
    expect(await sendLeanScript<number>(redis, script, ['lock', 'token-2'])).toBe(0);
    await redis.script('FLUSH');
    expect(await redis.script('EXISTS', script.sha)).toEqual([0]);
    expect(await sendLeanScript<number>(redis, script, ['lock', 'token-2'])).toBe(0);
    expect(await redis.script('EXISTS', script.sha)).toEqual([1]);
    expect(await sendLeanScript<number>(redis, script, ['lock', 'token-1'])).toBe(1);
    expect(await redis.exists('lock')).toBe(0);
    // An error inside the script is the caller's, not a reason to resend.
    const broken = await sendLeanScript(redis, { ...script, sha: 'f'.repeat(40), lua: 'return redis.error_reply("ERR broken")' }, [
      'x',
      'y',
    ]).catch((error: unknown) => error);
    expect(broken).toBeInstanceOf(ReplyError);
    expect((broken as Error).message).toBe('ERR broken');
  });

  it('applies the client’s keyPrefix and commandTimeout as its own methods do', async () => {
    // A timeout a loaded machine's first commands cannot outlast (100 ms once timed out the XADD below, on CI).
    const prefixed = new Redis(server.url, { keyPrefix: 'pfx:', commandTimeout: 1500 });
    try {
      await sendLean(prefixed, 'xadd', ['stream', '*', 'f', 'v']);
      expect(await redis.xlen('pfx:stream')).toBe(1);
      expect(await redis.exists('stream')).toBe(0);
      // A command that outlasts commandTimeout is rejected by ioredis's timer, through the command's own reject.
      const timedOut = await sendLean(prefixed, 'blpop', ['empty-list', 20]).catch((error: unknown) => error);
      expect((timedOut as Error).message).toMatch(/timed out/i);
    } finally {
      prefixed.disconnect();
    }
  });
});
