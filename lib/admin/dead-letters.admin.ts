import { randomBytes } from 'node:crypto';
import type { AdminView } from './admin.types';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { DecodeError } from '../errors/decode.error';
import { InvalidDeadLetterError } from '../errors/invalid-dead-letter.error';
import { RedisFullError } from '../errors/redis-full.error';
import { isMalformed } from '../wire/codec';
import { DeadLetter, decodeDeadLetter, originalEntry } from '../wire/dead-letter.codec';
import { redeliver, Redelivery } from '../redelivery/redelivery';
import { partitionForKey } from '../wire/partitioner';
import type { EventrailRedis } from '../redis/eventrail-redis';
import { isStreamId } from '../wire/stream-id';
import type { ProgressListener } from './operations.types';
import type { DeadLetterPage } from './admin.types';
import { DEFAULT_PAGE_BYTES, entrySize, nextRead, pageBudget, readBudgeted } from './page-budget';

/** Most dead letters replayed per round trip; fewer when they are big (see `page-budget.ts`). */
const PAGE = 500;
/**
 * How long a replay holds its claim on a dead letter. Claims of replayed
 * letters are left to expire rather than released, so a replay that read a
 * letter just before another one replayed and deleted it cannot claim it
 * again; only a replay paused this long between reading a letter and deleting
 * it lets another append the letter a second time.
 */
const CLAIM_TTL_MS = 60_000;

/**
 * Dead letters of a group: list, replay (to the group that dead-lettered them,
 * and only to it) and purge. `EventrailAdmin` checks the group exists first.
 */
export class DeadLetterAdmin {
  constructor(
    private readonly redis: EventrailRedis,
    private readonly options: AdminView,
  ) {}

  /**
   * A page of a group's dead letters, oldest first (newest first with
   * `newestFirst`); pass the last `id` as `after` for the next page. A page
   * may hold fewer than `count` when it reached `maxBytes`: ask again until
   * a page comes back empty, or use `page`, which says where to go on.
   */
  async list(group: string, options: DeadLetterPage = {}): Promise<DeadLetter[]> {
    return (await this.page(group, options)).items;
  }

  /**
   * A page of dead letters as `list` gives it, and `next`: the id to pass as
   * `after` for the next page, or null when this one reached the end.
   */
  async page(
    group: string,
    { count = 100, after, newestFirst = false, maxBytes }: DeadLetterPage = {},
  ): Promise<{ items: DeadLetter[]; next: string | null }> {
    if (!Number.isInteger(count) || count < 1 || count > 10_000) throw new InvalidOptionError('count', count, 'an integer from 1 to 10000');
    if (after !== undefined && !isStreamId(after))
      throw new InvalidOptionError('after', after, 'a dead-letter id such as "1700000000000-0"');
    const budget = pageBudget(maxBytes);
    const key = this.redis.keys.deadLetters(group);
    const { client } = this.redis;
    const read = newestFirst
      ? (start: string, n: number) => client.xrevrange(key, start, '-', 'COUNT', n)
      : (start: string, n: number) => client.xrange(key, start, '+', 'COUNT', n);
    const start = after ? `(${after}` : newestFirst ? '+' : '-';
    const { entries, more } = await readBudgeted(read, start, count, budget, (id) => `(${id}`);
    const items = entries.map(([id, fields]) => decodeDeadLetter(id, fields));
    return { items, next: more && items.length > 0 ? items[items.length - 1].id : null };
  }

  /** One dead letter by id, or null when there is none (replayed, purged or never existed). */
  async get(group: string, id: string): Promise<DeadLetter | null> {
    if (typeof id !== 'string' || !isStreamId(id)) throw new InvalidOptionError('id', id, 'a dead-letter id such as "1700000000000-0"');
    const [found] = await this.redis.client.xrange(this.redis.keys.deadLetters(group), id, id);
    return found ? decodeDeadLetter(found[0], found[1]) : null;
  }

  /** How many dead letters a group has. */
  count(group: string): Promise<number> {
    return this.redis.client.xlen(this.redis.keys.deadLetters(group));
  }

  /**
   * Appends dead letters back to the log for `group` alone (other groups skip
   * them), with their original event id, key and publish time, and removes
   * them from the dead-letter stream. Returns how many were replayed. Redis
   * refusing it for memory partway rejects with `RedisFullError`, whose `done`
   * is how many letters were replayed before the refusal.
   */
  async replay(group: string, ids: readonly string[] | 'all', onProgress?: ProgressListener): Promise<number> {
    if (ids !== 'all') {
      if (!Array.isArray(ids)) throw new InvalidOptionError('ids', ids, "an array of dead-letter ids or 'all'");
      for (const id of ids)
        if (typeof id !== 'string' || !isStreamId(id)) throw new InvalidOptionError('ids', id, 'dead-letter ids such as "1700000000000-0"');
      let replayed = 0;
      let largest = 0;
      for (let i = 0; i < ids.length;) {
        // Pages of up to PAGE letters, fewer when they are big: a page is held in memory twice (read, then appended).
        const n = nextRead(Math.min(PAGE, ids.length - i), DEFAULT_PAGE_BYTES, largest);
        const page = await this.fetch(group, ids.slice(i, i + n));
        for (const [id, fields] of page) largest = Math.max(largest, entrySize(id, fields));
        replayed += await this.replayPage(group, page).catch((error: unknown) => refusedAfter(error, replayed));
        i += n;
        onProgress?.(i, ids.length);
      }
      return replayed;
    }
    let replayed = 0;
    // Up to the last dead letter now: a replay that fails again is dead-lettered anew, after it,
    // and must not be picked up by this same call (it would replay in a loop).
    const key = this.redis.keys.deadLetters(group);
    const [[last], total] = await Promise.all([this.redis.client.xrevrange(key, '+', '-', 'COUNT', 1), this.redis.client.xlen(key)]);
    if (!last) return 0;
    let after = '-';
    let done = 0;
    for (;;) {
      const { entries: page } = await readBudgeted(
        (start, n) => this.redis.client.xrange(key, start, last[0], 'COUNT', n),
        after,
        PAGE,
        DEFAULT_PAGE_BYTES,
        (id) => `(${id}`,
      );
      if (page.length === 0) return replayed;
      replayed += await this.replayPage(group, page).catch((error: unknown) => refusedAfter(error, replayed));
      done += page.length;
      onProgress?.(Math.min(done, total), total);
      after = `(${page[page.length - 1][0]}`;
    }
  }

  /**
   * Deletes every dead letter of a group; returns how many there were. One
   * script, not MULTI/EXEC: a full Redis refuses every command queued in a
   * MULTI, and a purge is how memory is freed then.
   */
  async purge(group: string): Promise<number> {
    return this.redis.scripts.purgeDeadLetters({ group });
  }

  private async fetch(group: string, ids: readonly string[]): Promise<Array<[string, string[]]>> {
    const key = this.redis.keys.deadLetters(group);
    const pipeline = this.redis.client.pipeline();
    for (const id of ids) pipeline.xrange(key, id, id);
    const replies = (await pipeline.exec()) ?? [];
    return replies.flatMap(([error, entries]) => (error ? [] : (entries as Array<[string, string[]]>)));
  }

  /**
   * Replays the letters of `page` this call manages to claim. Replays running
   * at once (two admin instances, two CLI runs) claim each letter with
   * `SET NX PX` under the group's hash tag, so each letter is appended by one
   * of them. The log streams live in the partitions' tags, so no script can
   * append and delete in one step on Redis Cluster: a letter is deleted only
   * after its append succeeded, so a crash in between can append it again
   * later, but never lose it.
   */
  private async replayPage(group: string, page: Array<[string, string[]]>): Promise<number> {
    if (page.length === 0) return 0;
    // Where each letter goes, before any is claimed: a letter that cannot be read back stops the replay with nothing of
    // its page claimed (claims would hold the page's letters for CLAIM_TTL_MS).
    const targets = page.map(([id, fields]) => this.targetOf(group, id, fields));
    const { keys, client } = this.redis;
    const token = randomBytes(12).toString('hex');
    const claiming = client.pipeline();
    for (const [id] of page) claiming.set(keys.replayClaim(group, id), token, 'PX', CLAIM_TTL_MS, 'NX');
    const claims = (await claiming.exec()) ?? [];
    const refused = claims.find(([error]) => error);
    const claimedAt = page.flatMap((_, i) => (claims[i]?.[1] === 'OK' ? [i] : []));
    const claimed = claimedAt.map((i) => page[i]);
    if (refused) {
      // A full Redis refuses the claims (and would refuse the appends): nothing of this page is replayed. Claims taken
      // before Redis crossed maxmemory go back, or a replay once memory is freed would pass over their letters.
      await this.releaseClaims(group, token, claimed);
      throw RedisFullError.from('replay dead letters', refused[0], 0);
    }
    const letters = claimedAt.map((i) => ({ id: page[i][0], ...targets[i] }));
    if (letters.length === 0) return 0;
    const failures = await redeliver(client, keys, group, letters, this.options.tracing);
    // Only what was appended leaves the dead-letter stream; the claims of the
    // others are released so that a later replay can try them again.
    const appended = letters.filter((_, i) => failures[i] === null).map(({ id }) => id);
    const settling = client.pipeline();
    if (appended.length > 0) settling.xdel(keys.deadLetters(group), ...appended);
    letters.forEach(({ id }, i) => {
      if (failures[i] !== null) this.redis.scripts.queueReleaseReplayClaim(settling, { group, id, token });
    });
    const replies = (await settling.exec()) ?? [];
    if (appended.length > 0 && replies[0]?.[0]) throw replies[0][0];
    // Redis crossed maxmemory between the claims and the appends: the refused letters stay dead letters, and the
    // replay stops here rather than answer a count short of what was asked as if it were done.
    const full = failures.find((failure) => failure !== null && RedisFullError.isOutOfMemory(failure));
    if (full) throw RedisFullError.from('replay dead letters', full, appended.length);
    return appended.length;
  }

  /** Gives back the claims this replay took on `letters` (each only while it still holds `token`). */
  private async releaseClaims(group: string, token: string, letters: ReadonlyArray<[string, string[]]>): Promise<void> {
    if (letters.length === 0) return;
    const releasing = this.redis.client.pipeline();
    for (const [id] of letters) this.redis.scripts.queueReleaseReplayClaim(releasing, { group, id, token });
    // A release that fails leaves its claim to expire (CLAIM_TTL_MS): the refusal is what the caller must hear.
    await releasing.exec().catch(() => undefined);
  }

  /** `replayTarget` of the letter `id`, or `InvalidDeadLetterError` naming it when it cannot be read back. */
  private targetOf(group: string, id: string, fields: string[]): Redelivery {
    try {
      return this.replayTarget(fields);
    } catch (error) {
      if (error instanceof DecodeError) throw new InvalidDeadLetterError(group, id, error.reason);
      throw error;
    }
  }

  /** The original entry, back to the partition its key maps to (a keyless one to where it was). */
  private replayTarget(fields: string[]): Redelivery {
    const { entry, partition } = originalEntry(fields, this.redis.keys.logTag);
    const partitions = this.options.partitions;
    const key = isMalformed(entry) ? null : entry.key;
    if (key !== null) return { entry, partition: partitionForKey(key, partitions) };
    // A partition field that is not one of the log's (edited by hand: "1.5" names no stream) sends it to partition 0.
    return { entry, partition: Number.isInteger(partition) && partition >= 0 && partition < partitions ? partition : 0 };
  }
}

/** A page's refusal, counting the letters the pages before it replayed (`done`); any other error as it is. */
function refusedAfter(error: unknown, replayed: number): never {
  if (error instanceof RedisFullError || error instanceof InvalidDeadLetterError) throw error.after(replayed);
  throw error;
}
