import Redis from 'ioredis';
import type { EventrailKeys } from '../../lib/redis/keys';
import { compareStreamIds } from '../../lib/wire/stream-id';

/** A window in which a reset of `group` may have moved its offsets back (from the call until its answer). */
export interface ResetWindow {
  group: string;
  began: number;
  ended: number;
}

interface Sample {
  began: number;
  ended: number;
  /** Committed offset per `group|partition` (null: none yet). */
  offsets: Map<string, string | null>;
}

/**
 * Reads every committed offset of the groups every `everyMs` (25 ms: a stale commit that moved an offset back lives only until the next commit) while a
 * schedule runs, on a connection of its own that fails at once while Redis is
 * down (those samples are skipped). `backwardMoves` compares each sample with
 * the one before: an offset that moved back is a violation unless a reset of
 * its group overlaps the two samples.
 */
export class OffsetSampler {
  samples = 0;
  private readonly client: Redis;
  private previous?: Sample;
  private readonly moves: Array<{ key: string; from: string | null; to: string | null; between: [number, number] }> = [];
  private timer?: NodeJS.Timeout;
  private inFlight?: Promise<void>;

  constructor(
    url: string,
    private readonly keys: EventrailKeys,
    private readonly groups: readonly string[],
    private readonly everyMs = 25,
  ) {
    this.client = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    this.client.on('error', () => undefined);
  }

  start(): void {
    const tick = (): void => {
      this.inFlight = this.sample().finally(() => {
        if (this.timer) this.timer = setTimeout(tick, this.everyMs);
      });
    };
    this.timer = setTimeout(tick, 0);
  }

  /** Stops sampling after one last sample. */
  async stop(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.inFlight;
    await this.sample();
    this.client.disconnect();
  }

  /** Moves back that no reset explains. */
  backwardMoves(resets: readonly ResetWindow[]): string[] {
    return this.moves
      .filter(({ key, between: [from, to] }) => {
        const group = key.slice(0, key.lastIndexOf('|'));
        return !resets.some((r) => r.group === group && r.began <= to && r.ended >= from);
      })
      .map((m) => `offset ${m.key} moved back from ${m.from} to ${m.to} between samples at ${m.between[0]} and ${m.between[1]}`);
  }

  private async sample(): Promise<void> {
    const began = Date.now();
    const pipeline = this.client.pipeline();
    const names: string[] = [];
    for (const group of this.groups) {
      for (let p = 0; p < this.keys.partitions; p++) {
        names.push(`${group}|${p}`);
        pipeline.get(this.keys.offset(group, p));
      }
    }
    let replies: Array<[Error | null, unknown]>;
    try {
      replies = (await pipeline.exec()) ?? [];
    } catch {
      return; // Redis is down: no sample
    }
    if (replies.length !== names.length || replies.some(([error]) => error)) return;
    const sample: Sample = { began, ended: Date.now(), offsets: new Map(names.map((n, i) => [n, replies[i][1] as string | null])) };
    this.samples++;
    const before = this.previous;
    this.previous = sample;
    if (!before) return;
    for (const [key, to] of sample.offsets) {
      const from = before.offsets.get(key) ?? null;
      if (from !== null && (to === null || compareStreamIds(to, from) < 0))
        this.moves.push({ key, from, to, between: [before.began, sample.ended] });
    }
  }
}
