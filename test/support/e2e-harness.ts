import { INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailPublisher, PublishInput, PublishResult } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { compareStreamIds } from '../../lib/wire/stream-id';
import { createApp } from './app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from './helpers';
import { E2E_EVENT, Fleet, Handled, WorkerConfig } from './processes';

/**
 * One e2e test's world: its own key prefix, a publisher app in the test
 * process (no handlers, so it consumes nothing), a plain Redis client to look
 * at leases and offsets, and the fleet of worker processes.
 */
export class E2eWorld {
  readonly prefix: string;
  readonly redis = new Redis(testRedisUrl());
  readonly fleet = new Fleet();
  readonly keys: EventrailKeys;
  private app?: INestApplicationContext;

  constructor(
    name: string,
    readonly partitions: number,
    readonly group = 'workers',
  ) {
    this.prefix = uniquePrefix(name);
    this.keys = new EventrailKeys(this.prefix, partitions);
  }

  async start(): Promise<void> {
    this.app = await createApp({ prefix: this.prefix, partitions: this.partitions });
  }

  /** Kills every worker, closes the publisher and deletes the prefix; safe after a failed start. */
  async stop(): Promise<void> {
    await this.fleet.killAll();
    await this.app?.close();
    await deletePrefix(this.redis, this.prefix);
    this.redis.disconnect();
  }

  /** Worker settings of this world; `overrides` picks the name, consumer options, delays, gates. */
  worker(overrides: Partial<WorkerConfig> & Pick<WorkerConfig, 'name'>): WorkerConfig {
    return { redisUrl: testRedisUrl(), prefix: this.prefix, partitions: this.partitions, group: this.group, ...overrides };
  }

  publish(events: ReadonlyArray<PublishInput>): Promise<PublishResult[]> {
    return (this.app as INestApplicationContext).get(EventrailPublisher).publishMany(events);
  }

  /** Worker id holding each partition's lease (null when free). */
  async leaseOwners(): Promise<Array<string | null>> {
    const keys = Array.from({ length: this.partitions }, (_, p) => this.keys.lease(this.group, p));
    const values = await this.redis.mget(...keys);
    return values.map((value) => (value === null ? null : value.slice(0, value.lastIndexOf(':'))));
  }

  offsetKey(partition: number): string {
    return this.keys.offset(this.group, partition);
  }

  /**
   * Waits until every partition is leased by one of `workerIds`, and they hold
   * `counts` partitions between them (in any order: which worker gets the
   * smaller share is not fixed).
   */
  async waitForSplit(workerIds: readonly string[], counts: readonly number[], timeoutMs = 15_000): Promise<Array<string | null>> {
    const byCount = (x: number, y: number): number => x - y;
    const wanted = JSON.stringify([...counts].sort(byCount));
    let owners: Array<string | null> = [];
    await waitFor(
      async () => {
        owners = await this.leaseOwners();
        const held = workerIds.map((id) => owners.filter((o) => o === id).length).sort(byCount);
        return owners.every((o) => o !== null && workerIds.includes(o)) && JSON.stringify(held) === wanted;
      },
      () => `lease owners ${JSON.stringify(owners)} to split ${wanted} between ${JSON.stringify(workerIds)}`,
      timeoutMs,
    );
    return owners;
  }

  /** Waits until every id in `ids` was handled at least once. */
  async waitForHandled(ids: Iterable<string>, timeoutMs = 30_000): Promise<void> {
    const wanted = [...ids];
    await waitFor(
      () => {
        const seen = this.fleet.handledIds();
        return wanted.every((id) => seen.has(id));
      },
      () => {
        const seen = this.fleet.handledIds();
        const missing = wanted.filter((id) => !seen.has(id));
        return `${missing.length} of ${wanted.length} events handled; workers:\n${this.fleet.workers.map((w) => w.describe()).join('\n')}`;
      },
      timeoutMs,
    );
  }
}

/**
 * A steady producer: one event per key (next seq) every `everyMs`, until
 * stopped, so workers come and go while events flow. The pause only paces
 * the producer; no test waits on it.
 */
export class Flow {
  readonly published: PublishResult[] = [];
  private running = true;
  private readonly loop: Promise<void>;

  constructor(
    private readonly world: E2eWorld,
    private readonly keys: number,
    private readonly everyMs: number,
  ) {
    this.loop = this.run();
  }

  /** Stops publishing; resolves with every event published. */
  async stop(): Promise<PublishResult[]> {
    this.running = false;
    await this.loop;
    return this.published;
  }

  private async run(): Promise<void> {
    for (let seq = 1; this.running; seq++) {
      this.published.push(...(await this.world.publish(keyedEvents(this.keys, 1, seq))));
      await new Promise((resolve) => setTimeout(resolve, this.everyMs));
    }
  }
}

/** `perKey` events for each of `keys` keys, seq `from`.. per key, interleaved across keys. */
export function keyedEvents(keys: number, perKey: number, from = 1): PublishInput[] {
  const events: PublishInput[] = [];
  for (let seq = from; seq < from + perKey; seq++) {
    for (let k = 0; k < keys; k++) events.push({ event: E2E_EVENT, key: `key-${k}`, data: { seq } });
  }
  return events;
}

/** Event ids handled more than once. */
export function duplicates(handled: readonly Handled[]): string[] {
  const counts = new Map<string, number>();
  for (const h of handled) counts.set(h.id, (counts.get(h.id) ?? 0) + 1);
  return [...counts].filter(([, n]) => n > 1).map(([id]) => id);
}

/**
 * Per key, the first handling of each event must start in seq order: a later
 * event of a key never ran before an earlier one. Returns the violations.
 */
export function orderViolations(handled: readonly Handled[]): string[] {
  const firsts = new Map<string, Map<number, Handled>>();
  for (const h of handled) {
    const byKey = firsts.get(h.key ?? '') ?? new Map<number, Handled>();
    firsts.set(h.key ?? '', byKey);
    const seen = byKey.get(h.seq);
    if (!seen || h.startedAt < seen.startedAt) byKey.set(h.seq, h);
  }
  const violations: string[] = [];
  for (const [key, bySeq] of firsts) {
    const ordered = [...bySeq.values()].sort((a, b) => a.startedAt - b.startedAt);
    for (let i = 1; i < ordered.length; i++) {
      if (ordered[i].seq < ordered[i - 1].seq) violations.push(`${key}: seq ${ordered[i].seq} started before seq ${ordered[i - 1].seq}`);
    }
  }
  return violations;
}

/**
 * Every handling of a key must start after the previous one ended: same-key
 * events never run side by side. Only meaningful without failover (a zombie
 * may legitimately overlap its successor). 1 ms slack between processes,
 * whose clocks are sampled separately.
 */
export function overlapViolations(handled: readonly Handled[]): string[] {
  const violations: string[] = [];
  for (const [key, list] of groupBy(handled, (h) => h.key ?? '')) {
    list.sort((a, b) => a.startedAt - b.startedAt);
    for (let i = 1; i < list.length; i++) {
      const [prev, cur] = [list[i - 1], list[i]];
      const slack = prev.pid === cur.pid ? 0 : 1;
      if (cur.startedAt + slack < prev.endedAt)
        violations.push(`${key}: seq ${cur.seq} (pid ${cur.pid}) overlapped seq ${prev.seq} (pid ${prev.pid})`);
    }
  }
  return violations;
}

/**
 * Per partition, a process never starts a handler while another process is
 * still running one there: the lease hands a partition over only after its
 * old owner finished. Not for failover tests (a frozen or dead owner's calls
 * are not all reported).
 */
export function handoverOverlaps(handled: readonly Handled[]): string[] {
  const violations: string[] = [];
  for (const [partition, list] of groupBy(handled, (h) => h.partition)) {
    list.sort((a, b) => a.startedAt - b.startedAt);
    const lastEnd = new Map<number, Handled>();
    for (const cur of list) {
      for (const [pid, prev] of lastEnd) {
        if (pid !== cur.pid && cur.startedAt + 1 < prev.endedAt) {
          violations.push(`partition ${partition}: pid ${cur.pid} started ${cur.id} while pid ${pid} still ran ${prev.id}`);
        }
      }
      const prev = lastEnd.get(cur.pid);
      if (!prev || cur.endedAt > prev.endedAt) lastEnd.set(cur.pid, cur);
    }
  }
  return violations;
}

function groupBy<K>(handled: readonly Handled[], keyOf: (h: Handled) => K): Map<K, Handled[]> {
  const groups = new Map<K, Handled[]>();
  for (const h of handled) {
    const list = groups.get(keyOf(h));
    if (list) list.push(h);
    else groups.set(keyOf(h), [h]);
  }
  return groups;
}

/**
 * Samples a committed offset key every few ms on its own connection, so a
 * commit that moved it backwards, however briefly, is seen.
 */
export class OffsetSampler {
  readonly samples: Array<{ at: number; value: string | null }> = [];
  private readonly redis = new Redis(testRedisUrl());
  private running = true;
  private readonly loop: Promise<void>;

  constructor(private readonly key: string) {
    this.loop = this.run();
  }

  get latest(): string | null {
    return this.samples.length ? this.samples[this.samples.length - 1].value : null;
  }

  /** Pairs of consecutive samples where the offset went backwards (or vanished). */
  regressions(): string[] {
    const out: string[] = [];
    for (let i = 1; i < this.samples.length; i++) {
      const [a, b] = [this.samples[i - 1].value, this.samples[i].value];
      if (a !== null && (b === null || compareStreamIds(b, a) < 0)) out.push(`${a} -> ${b}`);
    }
    return out;
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
    this.redis.disconnect();
  }

  private async run(): Promise<void> {
    while (this.running) {
      this.samples.push({ at: Date.now(), value: await this.redis.get(this.key) });
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  }
}
