import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChainableCommander, Cluster, Redis } from 'ioredis';
import type { LeanScript } from './lean-command';

/** readBacklog-1.lua's answer, read as Buffers: the entries as XRANGE answers them, the biggest entry's size, the left-out entry's size. */
export type ReadBacklogReply = [entries: Array<[id: Buffer, fields: Buffer[]]>, largest: number, left: number];

/**
 * Commands eventrail adds to a client, one per Lua file named
 * `<verbNoun>-<numberOfKeys>.lua` (`-n`: the caller gives the number of keys
 * first, as with EVAL's numkeys). Registered once per client with
 * `defineCommand`, so ioredis sends EVALSHA and falls back on NOSCRIPT.
 */
export interface EventrailCommands {
  eventrailAcquireLease(
    lease: string,
    epoch: string,
    offset: string,
    stream: string,
    recovery: string,
    workerId: string,
    ttlMs: number,
    initialMode: 'start' | 'end' | 'id',
    initialId: string,
    generation?: string,
  ): Promise<[string, string, number] | null>;
  eventrailCommitOffset(
    lease: string,
    offset: string,
    done: string,
    recovery: string,
    stream: string,
    token: string,
    id: string,
    ttlMs: number,
    markTtlMs: number,
    /** The caller's previous commit (see commitOffset-5.lua), what it read after it (first entry and count, or ''), and whether to check the position now. */
    since: string,
    from: string,
    count: number | '',
    verify: '0' | '1',
    /** How many parked lines change; then each line's field and state ('' releases it), then the done ids. */
    parkedChanges: number,
    ...parkedThenDoneIds: string[]
  ): Promise<number>;
  eventrailMarkDelivery(recovery: string, offset: string): Promise<number>;
  eventrailMarkFailure(recovery: string, offset: string, nowMs: number): Promise<number>;
  eventrailRenewLease(lease: string, token: string, ttlMs: number): Promise<number>;
  eventrailBarMembers(lease: string, recovery: string, ttlMs: number, count: number, ...workerIdsThenAble: string[]): Promise<number>;
  eventrailReleaseLease(lease: string, recovery: string, token: string, epoch: string): Promise<number>;
  eventrailHeartbeat(
    members: string,
    info: string,
    seen: string,
    generation: string,
    workerId: string,
    ttlMs: number,
    infoJson: string,
  ): Promise<[string, string[]]>;
  eventrailDropGroup(
    members: string,
    info: string,
    events: string,
    seen: string,
    dlq: string,
    generation: string,
    mode: 'stale' | 'idle' | 'force',
    staleMs: number,
  ): Promise<string[]>;
  eventrailDropGroupPartition(offset: string, lease: string, recovery: string, done: string, generation: string): Promise<number>;
  eventrailResetOffset(
    lease: string,
    offset: string,
    epoch: string,
    recovery: string,
    done: string,
    stream: string,
    to: string,
    /** An exact count of the entries after `to` up to `upTo`, which was the last entry when `entriesAdded` was read (resetOffset-6.lua). */
    ...counted: [] | [upTo: string, count: number, entriesAdded: number]
  ): Promise<string | null>;
  /** After a retention trim: moves a live group's position anchor up to the new first entry (reanchorPosition-2.lua). */
  eventrailReanchorPosition(stream: string, recovery: string, firstBeforeTrim: string): Promise<number>;
  /** `[lag, committedOffset]`; lag -1 when the position cannot tell it (readLag-3.lua). */
  eventrailReadLag(stream: string, offset: string, recovery: string): Promise<[number, string | null]>;
  /** The entries after `after`, at most `count` and `maxBytes`, as XRANGE answers them, with the sizes of the biggest and of the one left out (readBacklog-1.lua); read as Buffers. */
  eventrailReadBacklogBuffer(stream: string, after: string, count: number, maxBytes: number, known?: number): Promise<ReadBacklogReply>;
  /** `[id, bytes]` of the entry after `after`, without the entry; null when none follows (entrySize-1.lua). */
  eventrailEntrySize(stream: string, after: string): Promise<[string, number] | null>;
  eventrailPublishDedup(
    dedup: string,
    stream: string,
    bigEntries: string,
    indexedFrom: string,
    windowMs: number,
    ...fields: string[]
  ): Promise<[string, number]>;
  /** XADD of a big entry that also records it in the partition's index of big entries; answers its id (appendIndexed-3.lua). */
  eventrailAppendIndexed(stream: string, bigEntries: string, indexedFrom: string, ...fields: string[]): Promise<string>;
  /** `[from, next, now]`: where the index of big entries is complete, the first big entry after `after` ('' if none), Redis's ms (readIndex-3.lua). */
  eventrailReadIndex(stream: string, bigEntries: string, indexedFrom: string, after: string): Promise<[string, string, string]>;
  /**
   * `[offsets]`, or `[offsets, error]` when an append failed after `offsets.length` were made or the run guard
   * held the run back (appendMany-n.lua): keys are the stream, then the run guard when there is one; arguments
   * the events' width, the guard's runs before, more and TTL (with a guard), then the events.
   */
  eventrailAppendMany(numberOfKeys: number, ...keysAndArgs: Array<string | number>): Promise<[string[], string?]>;
  /**
   * `[offsets, duplicates]`, or `[offsets, duplicates, error]` when a command failed after `offsets.length`
   * events were done, or the run guard held the run back (appendManyDedup-n.lua): keys are the stream, one
   * dedup mark per event when the window is above 0, then the run guard when there is one; arguments the
   * window, the guard's runs before, more and TTL (all '' without one), then the events.
   */
  eventrailAppendManyDedup(numberOfKeys: number, ...keysAndArgs: Array<string | number>): Promise<[string[], number[], string?]>;
  eventrailReleaseLock(lock: string, token: string): Promise<number>;
  /** `SET NX PX` on a Redis over maxmemory (takeLock-1.lua, flag allow-oom): 1 taken, 0 held already. */
  eventrailTakeLock(lock: string, token: string, ttlMs: number): Promise<number>;
  /** `HSET` of an archive mark on a Redis over maxmemory (markArchived-1.lua, flag allow-oom). */
  eventrailMarkArchived(archiveMarks: string, sinkId: string, lastId: string): Promise<number>;
  /** Deletes a stream and answers how many entries it held, on a full Redis too (purgeStream-1.lua). */
  eventrailPurgeStream(stream: string): Promise<number>;
  eventrailTrimLog(
    stream: string,
    archiveMarks: string,
    bigEntries: string,
    minId: string,
    mode: '~' | '=',
    sinkId: string,
    /** '1' allows a trim past the archive marks without a sink; missing counts as '0'. */
    allowUnarchived?: '0' | '1',
  ): Promise<number>;
}

export type EventrailClient = (Redis | Cluster) & EventrailCommands;

type Chained<T> = { [K in keyof T]: T[K] extends (...args: infer A) => unknown ? (...args: A) => EventrailPipeline : never };

/** A pipeline that also queues eventrail's commands. */
export type EventrailPipeline = ChainableCommander & Chained<EventrailCommands>;

const SCRIPTS = [
  'acquireLease-5',
  'commitOffset-5',
  'renewLease-1',
  'releaseLease-2',
  'barMembers-2',
  'heartbeat-4',
  'dropGroup-6',
  'dropGroupPartition-4',
  'publishDedup-4',
  'appendMany-n',
  'appendManyDedup-n',
  'appendIndexed-3',
  'readIndex-3',
  'resetOffset-6',
  'readLag-3',
  'readBacklog-1',
  'entrySize-1',
  'reanchorPosition-2',
  'markDelivery-1',
  'markFailure-1',
  'releaseLock-1',
  'takeLock-1',
  'trimLog-3',
  'markArchived-1',
  'purgeStream-1',
];
const REGISTERED = Symbol.for('eventrail.scripts');

let sources: Array<{ name: string; numberOfKeys: number; lua: string; sha: string }> | undefined;

/**
 * Lua shared by several scripts (Redis has no includes): a line
 * `--@include <name>` is replaced with `<name>.lua` from this folder, once,
 * before the script is registered, so the SHA covers the pasted text.
 */
const INCLUDE = /^--@include ([a-z-]+)$/gm;

function withIncludes(lua: string): string {
  return lua.replace(INCLUDE, (_, name: string) => readFileSync(join(__dirname, 'scripts', `${name}.lua`), 'utf8'));
}

function loadSources(): typeof sources & object {
  sources ??= SCRIPTS.map((file) => {
    const [verbNoun, keys] = file.split('-');
    const lua = withIncludes(readFileSync(join(__dirname, 'scripts', `${file}.lua`), 'utf8'));
    return {
      name: `eventrail${verbNoun[0].toUpperCase()}${verbNoun.slice(1)}`,
      // -1: given by the caller with each call.
      numberOfKeys: keys === 'n' ? -1 : Number(keys),
      lua,
      sha: createHash('sha1').update(lua).digest('hex'),
    };
  });
  return sources;
}

/** Adds eventrail's commands to `client` (once; safe to call again). */
export function registerScripts(client: Redis | Cluster): EventrailClient {
  const marked = client as unknown as Record<symbol, boolean>;
  if (!marked[REGISTERED]) {
    for (const script of loadSources()) {
      const numberOfKeys = script.numberOfKeys < 0 ? undefined : script.numberOfKeys;
      client.defineCommand(script.name, { numberOfKeys, lua: script.lua });
    }
    marked[REGISTERED] = true;
  }
  return client as EventrailClient;
}

let byName: Map<string, LeanScript> | undefined;

/**
 * Script `name` (as registered: `eventrailCommitOffset`, ...) for
 * `sendLeanScript` (redis/lean-command.ts). Only the facade
 * (redis/eventrail-scripts.ts) calls scripts, this way or as
 * `client.eventrail...()`.
 */
export function leanScript(name: string): LeanScript {
  byName ??= new Map(loadSources().map((s) => [s.name, s]));
  const script = byName.get(name);
  if (!script) throw new Error(`no eventrail script named ${name}`);
  return script;
}
