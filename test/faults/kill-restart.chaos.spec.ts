import Redis from 'ioredis';
import { EventrailPublisher } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { uniquePrefix, waitFor } from '../support/helpers';
import { chaosKeys, decodeHandling, GROUPS } from './support/chaos-protocol';
import { DurableRedis } from './support/durable-redis';
import { KeyedProducer, ProducerLimits } from './support/keyed-producer';
import { entryRef, hasParkedLines, keyOrderViolations, offsetsAndEnds, readLog } from './support/log-checks';
import { useSupervisedRun } from './support/supervised-run';
import { Supervisor } from './support/supervisor';

const LOCK_TTL_MS = 1500;
/**
 * Retries cover a Redis outage: a handler cannot record its handling while Redis is down. The
 * group's ordering is the default ('key'): a failing message is parked behind its key and the
 * committed offset moves past it, so the drain below also waits for every parked line.
 */
const CONSUMER = {
  concurrency: 4,
  lockTtlMs: LOCK_TTL_MS,
  heartbeatTtlMs: LOCK_TTL_MS,
  maxRetries: 100,
  retryBackoffMs: 50,
  retryBackoffMaxMs: 500,
};

interface Scenario {
  name: string;
  partitions: number;
  workers: number;
  limits: ProducerLimits;
  /** A worker is SIGKILLed every [min, max] ms while the producer runs; none when absent. */
  killEveryMs?: readonly [number, number];
  /** Redis is SIGKILLed and restarted this often, evenly spread over the producer's progress... */
  redisCrashes: number;
  /** ...and stays down for [min, max] ms each time. */
  redisDownMs: readonly [number, number];
  /** How long the group may take to catch up once the producer has stopped. */
  drainTimeoutMs: number;
}

/**
 * Kill and restart. A producer publishes keyed events over several partitions
 * to a Redis server of the test's own (AOF, fsync on every write) while worker
 * processes of one group run under a supervisor that restarts each one that
 * dies. Handlers record every handling in Redis with an RPUSH (and throw while
 * Redis is down, so the library parks the message and redelivers it). Two scenarios:
 * - three workers SIGKILLed at random moments, and Redis SIGKILLed twice;
 * - a lone worker (nobody else to take over a partition it loses track of)
 *   through two Redis outages that outlast its leases.
 *
 * Accepted events are those whose `publishMany` resolved; a batch rejected
 * during an outage is skipped, not retried (see KeyedProducer), though Redis
 * may have appended some of it. Once the group has caught up, each scenario asserts:
 * - every accepted event is in the log at the offset publish returned, and was handled at least once;
 * - so was every other entry of the log (appended by a batch whose publish rejected);
 * - per key, no entry was handled before every earlier entry of its key had been handled;
 * - no dead letters; each partition's committed offset is its stream's last id;
 * - every worker exit was the test's doing, and each killed worker was replaced.
 */
describe('chaos: kill and restart', () => {
  let server: DurableRedis | undefined;
  let redis: Redis | undefined;
  const current = useSupervisedRun();

  beforeAll(async () => {
    server = await DurableRedis.start();
    redis = new Redis(server.url);
    redis.on('error', () => undefined); // it reconnects after each restart
  });

  afterAll(async () => {
    redis?.disconnect();
    // The server and its AOF directory are the test's own: removing them removes every prefix too.
    await server?.destroy();
  });

  it('three workers SIGKILLed at random and Redis SIGKILLed twice: every accepted event handled, in per-key order', async () => {
    const figures = await run({
      name: 'kill-restart',
      partitions: 6,
      workers: 3,
      // 25k events in batches of 50 over 120 keys (about 12 s at this pace), for at most 35 s.
      limits: { keys: 120, batch: 50, target: 25_000, maxMs: 35_000, paceMs: 15 },
      killEveryMs: [400, 1200],
      redisCrashes: 2,
      // Up to longer than a lease: leases may expire while Redis is down.
      redisDownMs: [200, 2500],
      drainTimeoutMs: 60_000,
    });
    expect(figures.accepted).toBeGreaterThanOrEqual(10_000);
    // A kill needs a ready worker: how many there are depends on how fast killed workers boot again on the host.
    expect(figures.kills).toBeGreaterThanOrEqual(3);
  }, 150_000);

  // Alone, nobody else takes over a partition the worker loses track of during an outage. Each outage
  // outlasts the leases (LOCK_TTL_MS), so the worker finds them expired when Redis is back and must retake them.
  it('a lone worker lives through two long Redis outages on its own and resumes every partition', async () => {
    const figures = await run({
      name: 'kill-restart, lone worker',
      // Many partitions: each one's blocked read is a chance to lose track of it.
      partitions: 12,
      workers: 1,
      limits: { keys: 60, batch: 30, target: 6_000, maxMs: 30_000, paceMs: 15 },
      redisCrashes: 2,
      redisDownMs: [2 * LOCK_TTL_MS, 2 * LOCK_TTL_MS + 500],
      // A partition it lost track of never catches up at all: no need to wait long for that.
      drainTimeoutMs: 20_000,
    });
    expect(figures.accepted).toBeGreaterThanOrEqual(2_000);
  }, 90_000);

  /** Runs one scenario to the end, checks everything, prints the figures and returns the ones the caller bounds. */
  async function run(scenario: Scenario): Promise<{ accepted: number; kills: number }> {
    const began = Date.now();
    const durable = server as DurableRedis;
    const client = redis as Redis;
    const prefix = uniquePrefix('chaos-kill');
    const { partitions } = scenario;
    const keys = new EventrailKeys(prefix, partitions);
    const app = await createApp({ redis: durable.url, prefix, partitions });
    current.app = app;
    expect(await client.config('GET', 'appendonly')).toEqual(['appendonly', 'yes']);
    expect(await client.config('GET', 'appendfsync')).toEqual(['appendfsync', 'always']);

    const sup = new Supervisor({ mode: 'kill-restart', redisUrl: durable.url, prefix, partitions, consumer: CONSUMER }, scenario.workers);
    current.supervisor = sup;
    sup.start();
    await waitFor(
      () => sup.readyChildren().length === scenario.workers,
      () => `${scenario.workers} workers ready:\n${sup.describe()}`,
      30_000,
    );

    const producer = new KeyedProducer(app.get(EventrailPublisher), scenario.limits);
    producer.start();
    const [outagesMs] = await Promise.all([chaos(producer, sup, durable, scenario), producer.finished()]);
    const producedMs = producer.endedAt - producer.startedAt;

    let state: Awaited<ReturnType<typeof offsetsAndEnds>> = [];
    await waitFor(
      async () => {
        state = await offsetsAndEnds(client, keys, GROUPS.workers);
        if (!state.every(({ committed, last }) => last === null || committed === last)) return false;
        return !(await hasParkedLines(client, keys, GROUPS.workers));
      },
      () => `offsets to reach the end of the log and no line parked: ${JSON.stringify(state)}\n${sup.describe()}`,
      scenario.drainTimeoutMs,
      200,
    );
    const drainedMs = Date.now() - producer.endedAt;
    const deadLetters = await client.xlen(keys.deadLetters(GROUPS.workers));
    await sup.stop();

    const log = await readLog(client, keys);
    const handlings = (await client.lrange(chaosKeys.handlings(prefix), 0, -1)).map(decodeHandling);
    const handled = new Set(handlings.map((h) => entryRef(h.partition, h.offset)));
    const inLog = new Map(log.flat().map((e) => [entryRef(e.partition, e.offset), e.id]));
    const acceptedMissingFromLog = [...producer.accepted].filter(([ref, id]) => inLog.get(ref) !== id);
    const acceptedUnhandled = [...producer.accepted.keys()].filter((ref) => !handled.has(ref));
    const logUnhandled = [...inLog.keys()].filter((ref) => !handled.has(ref));
    const violations = keyOrderViolations(log, handlings);
    const appendedAnyway = [...inLog.keys()].filter((ref) => !producer.accepted.has(ref)).length;
    const kills = sup.kills.length;

    console.log(
      `${scenario.name}: ${producer.accepted.size} events accepted in ${producedMs} ms ` +
        `(${producer.rejectedEvents} rejected in ${producer.rejectedBatches} batches during outages, ${appendedAnyway} of those appended anyway), ` +
        `${inLog.size} log entries over ${partitions} partitions; ${scenario.workers} workers, ${kills} kills (${describeKills(sup)}), ` +
        `${sup.restarts} restarts; ${outagesMs.length} Redis SIGKILL+restarts (down ${outagesMs.join(', ')} ms); ` +
        `${handlings.length} handlings, ${handlings.length - handled.size} duplicates (redeliveries); ` +
        `${deadLetters} dead letters; ${violations.length} order violations; drained ${drainedMs} ms after the producer stopped; ` +
        `${Date.now() - began} ms in all`,
    );

    expect(outagesMs).toHaveLength(scenario.redisCrashes);
    // A worker that exited on its own: its last output says why (the exit record alone does not).
    if (sup.unexpectedExits.length > 0) console.log(`unexpected exits; the workers' last output:\n${sup.describe()}`);
    expect(sup.unexpectedExits).toEqual([]);
    expect(sup.crashes).toEqual([]);
    expect(sup.exits.length).toBe(kills + scenario.workers); // the kills, then the final stop of each slot
    expect(sup.restarts).toBe(kills); // every killed worker was replaced
    expect(acceptedMissingFromLog).toEqual([]);
    expect(acceptedUnhandled).toEqual([]);
    expect(logUnhandled).toEqual([]);
    expect(violations).toEqual([]);
    expect(deadLetters).toBe(0);
    for (const { committed, last } of await offsetsAndEnds(client, keys, GROUPS.workers)) expect(committed).toBe(last);
    return { accepted: producer.accepted.size, kills };
  }
});

/**
 * While the producer runs: SIGKILLs a random ready worker at random moments
 * (if the scenario kills), and SIGKILLs Redis when the producer is 1/(n+1),
 * 2/(n+1)... of the way, keeping it down for a random `redisDownMs`.
 * Resolves with each outage's length.
 */
async function chaos(producer: KeyedProducer, supervisor: Supervisor, server: DurableRedis, scenario: Scenario): Promise<number[]> {
  const outagesMs: number[] = [];
  const stepMs: readonly [number, number] = scenario.killEveryMs ?? [200, 400];
  const crashDue = (): boolean =>
    outagesMs.length < scenario.redisCrashes && producer.progress() >= (outagesMs.length + 1) / (scenario.redisCrashes + 1);
  // The producer goes on past its target until every crash is made and ten more batches are accepted
  // after the last one (the workers must resume then): a restart that takes seconds on a loaded host
  // otherwise let it finish with a crash never made (CI, Valkey lane: one outage of 9.3 s, producer done).
  let acceptedAfterLastCrash = 0;
  producer.keepGoingWhile(
    () => outagesMs.length < scenario.redisCrashes || producer.accepted.size < acceptedAfterLastCrash + 10 * scenario.limits.batch,
  );
  while (producer.isRunning) {
    await pause(between(stepMs));
    if (!producer.isRunning) break;
    if (crashDue()) {
      outagesMs.push(await server.crashAndRestart(between(scenario.redisDownMs)));
      acceptedAfterLastCrash = producer.accepted.size;
    } else if (scenario.killEveryMs && !supervisor.killRandom()) {
      // Every worker is still booting after its kill: the next kill waits for one to be ready, but
      // not past a crash that falls due (on a loaded host the workers can take seconds to boot, and
      // the producer could finish meanwhile with a crash never made: seen with two CI runs at once).
      while (producer.isRunning && supervisor.readyChildren().length === 0 && !crashDue()) await pause(50);
    }
  }
  return outagesMs;
}

function describeKills(supervisor: Supervisor): string {
  const bySlot = Array.from({ length: supervisor.slots }, (_, slot) => supervisor.kills.filter((k) => k.slot === slot).length);
  return `per worker ${bySlot.join('/')}`;
}

/** A random duration in [min, max] ms. */
function between([min, max]: readonly [number, number]): number {
  return min + Math.random() * (max - min);
}

/** Paces the chaos loop; no assertion depends on it. */
function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
