import Redis from 'ioredis';
import { EventrailKeys } from '../../lib/redis/keys';
import { PARKED_FIELD_PREFIX } from '../../lib/consumer/handling/parked-lines';

/**
 * One reading: at Redis time `at` (ms), whether a live member of the group had a handler for the event,
 * its committed offsets and its parked entries, read in one MULTI.
 */
export interface WantSample {
  at: number;
  wanted: boolean;
  /** The group's committed offset per partition ('' where none yet). */
  committed: string[];
  /**
   * Per partition, the stream ids held in its parked lines ('key', 'unordered'). The committed offset
   * moves past a message when it is parked; the message is passed over only when its line lets it go.
   */
  parked?: string[][];
}

/**
 * Samples, every 50 ms, whether a live member of `group` handles `event`, as
 * the members' heartbeats registered it (their details' `events`), on the
 * Redis clock that also stamps the log's entries, with the group's committed
 * offsets and parked lines. During a rolling deploy the checks ask it whether
 * an event was wanted by a live member from its publish until the group let
 * it go. Readings fail while Redis is down and are simply missing.
 */
export class WantSampler {
  readonly samples: WantSample[] = [];
  private readonly redis: Redis;
  private timer?: NodeJS.Timeout;
  private reading?: Promise<void>;

  constructor(
    url: string,
    private readonly keys: EventrailKeys,
    private readonly group: string,
    private readonly event: string,
  ) {
    this.redis = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
    this.redis.on('error', () => undefined);
  }

  start(): void {
    this.timer = setInterval(() => {
      this.reading ??= this.read().finally(() => (this.reading = undefined));
    }, 50);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.reading?.catch(() => undefined);
    this.redis.disconnect();
  }

  private async read(): Promise<void> {
    try {
      const partitions = Array.from({ length: this.keys.partitions }, (_, p) => p);
      const multi = this.redis
        .multi()
        .time()
        .hgetall(this.keys.memberInfo(this.group))
        .mget(...partitions.map((p) => this.keys.offset(this.group, p)));
      for (const p of partitions) multi.hgetall(this.keys.recovery(this.group, p));
      const [[, time], [, details], [, committed], ...recovery] = (await multi.exec()) as [
        [unknown, [string, string]],
        [unknown, Record<string, string>],
        [unknown, Array<string | null>],
        ...Array<[unknown, Record<string, string>]>,
      ];
      const at = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
      const live = new Set(await this.redis.zrangebyscore(this.keys.members(this.group), at, '+inf'));
      const wanted = Object.entries(details).some(([member, json]) => live.has(member) && handles(json, this.event));
      const parked = recovery.map(([, fields]) => parkedIds(fields));
      this.samples.push({ at, wanted, committed: committed.map((c) => c ?? ''), parked });
    } catch {
      // Redis is down: no reading.
    }
  }
}

/** The stream ids of every parked line in a recovery hash (`park:<line>` fields, JSON with `ids`). */
function parkedIds(fields: Record<string, string>): string[] {
  const ids: string[] = [];
  for (const [field, json] of Object.entries(fields)) {
    if (!field.startsWith(PARKED_FIELD_PREFIX)) continue;
    try {
      const line = JSON.parse(json) as { ids?: unknown };
      if (Array.isArray(line.ids)) ids.push(...line.ids.filter((id): id is string => typeof id === 'string'));
    } catch {
      // A line the library itself would drop as unreadable holds nothing.
    }
  }
  return ids;
}

function handles(json: string, event: string): boolean {
  try {
    const { events } = JSON.parse(json) as { events?: unknown };
    return Array.isArray(events) && events.includes(event);
  } catch {
    return false;
  }
}

/**
 * Whether the event at `offset` of `partition` (published at `publishedAt`)
 * was wanted by a live member from its publish until the group first let it
 * go: its committed offset is past it and no parked line holds it (a parked
 * message is behind the committed offset until its line releases it, and a
 * member without its handler passes it over only then). Every reading in
 * between says so, and so do the last reading before the publish and the
 * first after the pass (lenient at the edges: a member joining or leaving
 * between two readings). A group's members may only pass over it when nobody
 * live wants it any more.
 */
export function wantedUntilPassed(samples: readonly WantSample[], partition: number, offset: string, publishedAt: number): boolean {
  let before: WantSample | undefined;
  const between: WantSample[] = [];
  for (const sample of samples) {
    if (sample.at <= publishedAt) before = sample;
    else {
      between.push(sample);
      const past = sample.committed[partition] !== '' && compareIds(sample.committed[partition], offset) >= 0;
      if (past && !sample.parked?.[partition]?.includes(offset)) break;
    }
  }
  return before?.wanted === true && between.every((s) => s.wanted);
}

function compareIds(a: string, b: string): number {
  const [am, as] = a.split('-').map(Number);
  const [bm, bs] = b.split('-').map(Number);
  return am !== bm ? am - bm : as - bs;
}
