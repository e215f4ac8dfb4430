import Redis from 'ioredis';
import { ConsumerOptions, EventrailAdmin, EventrailPublisher, partitionForKey, PublishInput, PublishResult } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { chaosKeys, EVENTS, GROUPS } from '../faults/support/chaos-protocol';
import { offsetsAndEnds } from '../faults/support/log-checks';
import { useSupervisedRun } from '../faults/support/supervised-run';
import { Supervisor } from '../faults/support/supervisor';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

const LOCK_TTL_MS = 1000;
const MAX_DELIVERIES = 3;
const BEFORE = 20;
const AFTER = 20;
const LATER = 10;

interface World {
  prefix: string;
  keys: EventrailKeys;
  publisher: EventrailPublisher;
  admin: EventrailAdmin;
  supervisor: Supervisor;
  /** Seqs of the normal events handled so far, one per handling. */
  handledSeqs(): Promise<number[]>;
  /** Waits until the group's committed offset in `partition` is `offset`. */
  committedTo(partition: number, offset: string, what: string): Promise<void>;
}

/**
 * A poison message that kills its process (SIGKILL from inside its handler)
 * every time it is handled. A supervisor restarts the worker whenever it
 * dies. The poison must be dead-lettered with reason `max-deliveries` after a
 * bounded number of crashes, and nothing else may be lost or dead-lettered.
 */
describe('e2e: a message that crashes its worker every time', () => {
  const redis = new Redis(testRedisUrl());
  const prefixes: string[] = [];
  const current = useSupervisedRun();

  afterAll(async () => {
    for (const prefix of prefixes) await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  /**
   * One partition, the poison in the middle of a backlog. The first worker
   * meets the poison inside a normal batch (the happy path counts nothing) and
   * dies; every recovering worker counts its start of the poison in Redis
   * before handling it, and the one whose count reaches `maxDeliveries`
   * dead-letters it unhandled. So exactly `maxDeliveries` crashes.
   */
  it('dead-letters the poison after a bounded number of crashes, handles everything else, and keeps going', async () => {
    const began = Date.now();
    const world = await start(1);
    const { publisher, admin, supervisor: sup } = world;
    const normal = (seq: number): PublishInput => ({ event: EVENTS.normal, key: 'account-1', data: { seq } });
    // Published before any worker reads: the first worker gets them in one batch.
    const published = await publisher.publishMany([
      ...range(1, BEFORE).map(normal),
      { event: EVENTS.poison, key: 'account-1', data: { seq: BEFORE + 1 } },
      ...range(BEFORE + 2, BEFORE + 1 + AFTER).map(normal),
    ]);
    const poison = published[BEFORE] as PublishResult;
    sup.start();

    await waitFor(
      async () => (await redis.xlen(world.keys.deadLetters(GROUPS.loop))) > 0,
      () => `the poison to be dead-lettered; ${sup.crashes.length} crashes so far\n${sup.describe()}`,
      // maxDeliveries + 1 worker starts, each a process start (8 s and more on a loaded host).
      90_000,
    );
    const deadLetteredMs = Date.now() - began;
    await world.committedTo(0, published[published.length - 1].offset, 'the backlog');
    const crashes = sup.crashes.length;
    const poisonRuns = Number(await redis.get(chaosKeys.poisonRuns(world.prefix)));

    // The group goes on: later events are handled by the worker that survived, with no new crash.
    const survivor = await waitFor(
      () => sup.readyChildren()[0],
      () => `a running worker\n${sup.describe()}`,
    );
    const later = await publisher.publishMany(range(BEFORE + AFTER + 2, BEFORE + AFTER + 1 + LATER).map(normal));
    await world.committedTo(0, later[later.length - 1].offset, 'the later events');
    const seqs = await world.handledSeqs();
    const deadLetters = await admin.deadLetters(GROUPS.loop);
    const [{ committed, last }] = await offsetsAndEnds(redis, world.keys, GROUPS.loop);

    console.log(
      `crash-loop: ${published.length + later.length} events (1 poison); ${crashes} crashes (${poisonRuns} poison handler runs) ` +
        `with maxDeliveries ${MAX_DELIVERIES}, ${sup.restarts} restarts; dead-lettered after ${deadLetteredMs} ms ` +
        `(attempts ${deadLetters[0]?.attempts}); ${seqs.length} normal handlings of ${BEFORE + AFTER + LATER} normal events ` +
        `(${seqs.length - new Set(seqs).size} redeliveries); ${Date.now() - began} ms in all`,
    );

    expect(deadLetters).toHaveLength(1);
    expect(deadLetters[0]).toMatchObject({
      eventId: poison.id,
      event: EVENTS.poison,
      offset: poison.offset,
      partition: 0,
      reason: 'max-deliveries',
      attempts: MAX_DELIVERIES,
    });
    expect(sup.unexpectedExits).toEqual([]);
    expect(poisonRuns).toBe(crashes); // every crash was the poison, and every poison run crashed
    expect(crashes).toBe(MAX_DELIVERIES);
    expect(Number(await redis.get(chaosKeys.poisonRuns(world.prefix)))).toBe(poisonRuns); // never handled again
    expect(sup.crashes.length).toBe(crashes);
    expect(survivor.hasExited).toBe(false);
    expect([...new Set(seqs)].sort((a, b) => a - b)).toEqual([
      ...range(1, BEFORE),
      ...range(BEFORE + 2, BEFORE + 1 + AFTER),
      ...range(BEFORE + AFTER + 2, BEFORE + AFTER + 1 + LATER),
    ]);
    expect(committed).toBe(last);
  }, 150_000);

  /**
   * Two partitions in one worker: the poison loops in partition 0 while
   * partition 1 is quiet. Each crash also ends the worker's hold on partition
   * 1, but no entry of partition 1 was being handled, so none may be counted
   * as delivered: an event published to partition 1 after the loop is over
   * must be handled, not dead-lettered as `max-deliveries`.
   */
  it('counts no crash against a quiet partition of the same worker', async () => {
    const began = Date.now();
    const world = await start(2);
    const { publisher, admin, supervisor: sup } = world;
    const [loopKey, quietKey] = [keyOf(0, 2), keyOf(1, 2)];
    const poison = await publisher.publish(EVENTS.poison, { seq: 0 }, { key: loopKey });
    sup.start();
    await waitFor(
      async () => (await redis.xlen(world.keys.deadLetters(GROUPS.loop))) > 0,
      () => `the poison to be dead-lettered; ${sup.crashes.length} crashes so far\n${sup.describe()}`,
      // maxDeliveries + 1 worker starts, each a process start (8 s and more on a loaded host).
      90_000,
    );
    const crashes = sup.crashes.length;
    await waitFor(
      () => sup.readyChildren()[0],
      () => `a running worker\n${sup.describe()}`,
    );

    const quiet = await publisher.publish(EVENTS.normal, { seq: 1 }, { key: quietKey });
    const loud = await publisher.publish(EVENTS.normal, { seq: 2 }, { key: loopKey });
    await world.committedTo(1, quiet.offset, 'the event in the quiet partition');
    await world.committedTo(0, loud.offset, 'the event after the poison');
    const deadLetters = await admin.deadLetters(GROUPS.loop);
    const seqs = await world.handledSeqs();

    console.log(
      `crash-loop, quiet partition: ${crashes} crashes in partition 0 with maxDeliveries ${MAX_DELIVERIES}; ` +
        `then 1 event to each partition: handled seqs ${JSON.stringify(seqs)}; ` +
        `dead letters ${JSON.stringify(deadLetters.map((d) => ({ partition: d.partition, event: d.event, reason: d.reason })))}; ` +
        `${Date.now() - began} ms in all`,
    );

    expect(deadLetters.map((d) => d.eventId)).toEqual([poison.id]);
    expect([...new Set(seqs)].sort((a, b) => a - b)).toEqual([1, 2]);
    expect(sup.crashes.length).toBe(crashes);
    expect(sup.unexpectedExits).toEqual([]);
  }, 150_000);

  /**
   * Parked keys: the poison first throws (twice: its retries in place), is parked, and kills the worker on
   * its redelivery. Each redelivery is stored as running before it starts, so the next owner counts the
   * crash; after `maxDeliveries` the head is dead-lettered unhandled, and its key's later events go on.
   * Other keys are handled meanwhile.
   */
  it("with ordering 'key', counts crashes of a parked message's redeliveries and dead-letters it after maxDeliveries", async () => {
    const began = Date.now();
    const world = await start(1, { ordering: 'key', maxRetries: 1, retryBackoffMs: 5, redelivery: { delayMs: 50, maxDelayMs: 100 } });
    const { publisher, admin, supervisor: sup } = world;
    const published = await publisher.publishMany([
      { event: EVENTS.poison, key: 'account-1', data: { seq: 1, throwFirst: 2 } },
      { event: EVENTS.normal, key: 'account-1', data: { seq: 2 } },
      ...range(3, 12).map((seq): PublishInput => ({ event: EVENTS.normal, key: `other-${seq}`, data: { seq } })),
    ]);
    sup.start();
    await waitFor(
      async () => (await redis.xlen(world.keys.deadLetters(GROUPS.loop))) > 0,
      () => `the poison to be dead-lettered; ${sup.crashes.length} crashes so far\n${sup.describe()}`,
      90_000,
    );
    await waitFor(
      async () => (await world.handledSeqs()).includes(2),
      () => `the poison's key to go on\n${sup.describe()}`,
      30_000,
    );
    const seqs = await world.handledSeqs();
    const [letter] = await admin.deadLetters(GROUPS.loop);
    const poisonRuns = Number(await redis.get(chaosKeys.poisonRuns(world.prefix)));
    console.log(
      `crash-loop, parked: ${sup.crashes.length} crashes (${poisonRuns} poison redeliveries) with maxDeliveries ${MAX_DELIVERIES}; ` +
        `dead letter ${letter.reason} after ${letter.attempts}; ${Date.now() - began} ms in all`,
    );
    expect(letter).toMatchObject({ eventId: published[0].id, reason: 'max-deliveries', attempts: MAX_DELIVERIES });
    expect(sup.crashes.length).toBe(MAX_DELIVERIES);
    expect(poisonRuns).toBe(MAX_DELIVERIES);
    expect(sup.unexpectedExits).toEqual([]);
    expect([...new Set(seqs)].sort((a, b) => a - b)).toEqual(range(2, 12));
  }, 150_000);

  /** A publisher app and a one-slot supervisor (not started) on a prefix of their own. */
  async function start(partitions: number, consumer: ConsumerOptions = {}): Promise<World> {
    const prefix = uniquePrefix('e2e-crash-loop');
    prefixes.push(prefix);
    const keys = new EventrailKeys(prefix, partitions);
    const app = await createApp({ prefix, partitions });
    current.app = app;
    const sup = new Supervisor(
      {
        mode: 'crash-loop',
        redisUrl: testRedisUrl(),
        prefix,
        partitions,
        consumer: { lockTtlMs: LOCK_TTL_MS, heartbeatTtlMs: LOCK_TTL_MS, maxDeliveries: MAX_DELIVERIES, ...consumer },
      },
      1,
    );
    current.supervisor = sup;
    return {
      prefix,
      keys,
      publisher: app.get(EventrailPublisher),
      admin: app.get(EventrailAdmin),
      supervisor: sup,
      handledSeqs: async () => (await redis.lrange(chaosKeys.handledSeqs(prefix), 0, -1)).map((record) => Number(record.split('|')[0])),
      committedTo: async (partition, offset, what) => {
        await waitFor(
          async () => (await redis.get(keys.offset(GROUPS.loop, partition))) === offset,
          () => `the offset of partition ${partition} to pass ${what}\n${sup.describe()}`,
          15_000,
        );
      },
    };
  }
});

/** A key that lands in `partition`. */
function keyOf(partition: number, partitions: number): string {
  for (let i = 0; ; i++) if (partitionForKey(`account-${i}`, partitions) === partition) return `account-${i}`;
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
