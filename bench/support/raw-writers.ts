import { spawn } from 'node:child_process';
import Redis from 'ioredis';
import { BENCH_EVENT, minimalFields, PAYLOAD } from './payload';

/**
 * The raw writers eventrail's publishing is measured against: what a skilled engineer writes with
 * ioredis for the same entries (`event` and a 200-byte `data`, the fields eventrail writes for an
 * event without key or id), with the same replies (each entry's id).
 */

/**
 * XADD of every entry of a run in one script call (`runs` of `RUN` entries, each sent as soon as
 * it is built): the strongest raw batch writer on one connection.
 */
export const RAW_MULTI_XADD = `
local ids = {}
local n = 0
for i = 1, #ARGV, 4 do
  n = n + 1
  ids[n] = redis.call('XADD', KEYS[1], '*', ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
end
return ids`;

export interface MultiXaddClient extends Redis {
  rawMultiXadd(key: string, ...args: string[]): Promise<string[]>;
}

/** A plain client with `rawMultiXadd` defined (EVALSHA, loaded on first use). */
export function multiXaddClient(url: string): MultiXaddClient {
  const client = new Redis(url) as MultiXaddClient;
  client.defineCommand('rawMultiXadd', { numberOfKeys: 1, lua: RAW_MULTI_XADD });
  return client;
}

/** One batch of `count` entries as runs of `run` in script calls; resolves with the ids. */
export async function multiXaddBatch(client: MultiXaddClient, key: string, count: number, run: number): Promise<string[]> {
  const calls: Array<Promise<string[]>> = [];
  for (let from = 0; from < count; from += run) {
    const args: string[] = [];
    for (let i = from; i < Math.min(count, from + run); i++) args.push(...minimalFields(JSON.stringify(PAYLOAD)));
    calls.push(client.rawMultiXadd(key, ...args));
  }
  return (await Promise.all(calls)).flat();
}

interface Corkable {
  cork(): void;
  uncork(): void;
}

/** One batch of `count` XADDs written to the socket corked: one write for the batch, one reply each. */
export async function corkedXaddBatch(client: Redis, key: string, count: number): Promise<string[]> {
  const stream = (client as unknown as { stream: Corkable }).stream;
  const replies: Array<Promise<string | null>> = [];
  stream.cork();
  for (let i = 0; i < count; i++) replies.push(client.xadd(key, '*', ...minimalFields(JSON.stringify(PAYLOAD))));
  stream.uncork();
  return (await Promise.all(replies)) as string[];
}

/** One batch of `count` XADDs as one ioredis transaction (`multi()` ... `exec()`): appended all or nothing. */
export async function multiExecBatch(client: Redis, key: string, count: number): Promise<string[]> {
  const transaction = client.multi();
  for (let i = 0; i < count; i++) transaction.xadd(key, '*', ...minimalFields(JSON.stringify(PAYLOAD)));
  const replies = await transaction.exec();
  if (!replies) throw new Error('transaction discarded');
  return replies.map(([error, id]) => {
    if (error) throw error;
    return id as string;
  });
}

/**
 * The most calls of one tick that the Lua tick writer puts in one script call: the rest of the tick
 * follows in calls of as many, each sent once it is full, so Redis runs the first while the next ones are
 * built (eventrail's coalesced `publish` sends a tick's appends as transactions of at most as many). It
 * took the Lua writer from 124,700 to 216,600 calls/s with 1000 callers (7 rounds, separate cores); the
 * corked writer gained nothing from writing a tick in parts (215,500 against 239,100), so it writes
 * each tick whole.
 */
export const TICK_PART = 128;

/**
 * A plain client whose XADDs of one tick leave in one socket write: the first call of a tick corks
 * the socket, a `process.nextTick` uncorks it. What many callers of one process get from the
 * cheapest coalescing there is.
 */
export function tickCorkedXadd(client: Redis, key: string): () => Promise<string | null> {
  const stream = (client as unknown as { stream: Corkable }).stream;
  let corked = false;
  const uncork = (): void => {
    corked = false;
    stream.uncork();
  };
  return () => {
    if (!corked) {
      corked = true;
      stream.cork();
      process.nextTick(uncork);
    }
    return client.xadd(key, '*', ...minimalFields(JSON.stringify(PAYLOAD)));
  };
}

/**
 * The callers of one tick in parts of up to `TICK_PART`: `add` puts a caller's entry into the open part,
 * `send` sends a part once it is full (the tick's last one on `process.nextTick`) and answers each
 * entry's id, or its error, in order. Each caller resolves with its own.
 */
function tickParts<P>(open: () => P, add: (part: P) => void, send: (part: P) => Promise<Array<string | Error>>): () => Promise<string> {
  let pending: Array<{ resolve: (id: string) => void; reject: (error: Error) => void }> = [];
  let part = open();
  const flush = (): void => {
    if (pending.length === 0) return;
    const waiting = pending;
    const sent = part;
    pending = [];
    part = open();
    send(sent).then(
      (ids) => waiting.forEach((w, i) => (ids[i] instanceof Error ? w.reject(ids[i]) : w.resolve(ids[i]))),
      (error: Error) => waiting.forEach((w) => w.reject(error)),
    );
  };
  let scheduled = false;
  const endTick = (): void => {
    scheduled = false;
    flush();
  };
  return () =>
    new Promise<string>((resolve, reject) => {
      if (!scheduled) {
        scheduled = true;
        process.nextTick(endTick);
      }
      pending.push({ resolve, reject });
      add(part);
      if (pending.length === TICK_PART) flush();
    });
}

/** The callers of one tick share `rawMultiXadd` calls of up to `TICK_PART` entries: the per-tick Lua batch. */
export function tickMultiXadd(client: MultiXaddClient, key: string): () => Promise<string> {
  return tickParts<string[]>(
    () => [],
    (args) => args.push(...minimalFields(JSON.stringify(PAYLOAD))),
    (args) => client.rawMultiXadd(key, ...args),
  );
}

/**
 * The callers of one tick share ioredis transactions (`multi()` ... `exec()`) of up to `TICK_PART` XADDs:
 * what eventrail's coalesced `publish` sends, written with ioredis's own transaction.
 */
export function tickMultiExec(client: Redis, key: string): () => Promise<string> {
  return tickParts(
    () => client.multi(),
    (transaction) => void transaction.xadd(key, '*', ...minimalFields(JSON.stringify(PAYLOAD))),
    async (transaction) => {
      const replies = await transaction.exec();
      if (!replies) throw new Error('transaction discarded');
      return replies.map(([error, id]) => error ?? (id as string));
    },
  );
}

/**
 * The server's own ceiling for these entries: `redis-benchmark` XADDs, 50 clients pipelining 100
 * commands each. Events per second, or undefined when redis-benchmark is not installed.
 */
export function serverCeiling(url: string, key: string, events: number): Promise<number | undefined> {
  const { hostname, port } = new URL(url);
  const args = ['-h', hostname, '-p', port || '6379', '-n', String(events), '-P', '100', '-c', '50', '--csv'];
  args.push('XADD', key, '*', 'event', BENCH_EVENT, 'data', JSON.stringify(PAYLOAD));
  return new Promise((resolve) => {
    const child = spawn('redis-benchmark', args, { stdio: ['ignore', 'pipe', 'ignore'] });
    // It retries a server that does not answer for ever: a run that hangs ends as "no ceiling".
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000 + events / 10);
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.once('error', () => resolve(undefined));
    child.once('exit', () => {
      clearTimeout(timer);
      // "test","rps", then six latencies: the last line is the XADD's. Its test name holds the payload's
      // commas, so rps is counted from the end.
      const columns = (out.trim().split('\n').pop() ?? '').split(',');
      const rps = Number(columns[columns.length - 7]?.replace(/"/g, ''));
      resolve(Number.isFinite(rps) && rps > 0 ? rps : undefined);
    });
  });
}
