import { INestApplicationContext } from '@nestjs/common';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import Redis from 'ioredis';
import { defineEvent, EventrailPublisher, EventValidationError, partitionForKey, PublishInput } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { readEntry } from '../../lib/wire/codec';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';
import { seededRandom } from '../support/seeded-random';

const PARTITIONS = 2;

/**
 * Checks the test holds open: `validate` answers only when the test opens the
 * gate named in the data (a refinement waiting on a remote lookup that hangs
 * until then). Without a gate it answers at once or after some microtasks.
 */
class Gates {
  private readonly open = new Map<string, () => void>();
  private readonly opened = new Map<string, Promise<void>>();

  readonly schema: StandardSchemaV1<Checked> = {
    '~standard': {
      version: 1,
      vendor: 'test',
      validate: (value) => {
        const data = value as Checked;
        const result = data.ok ? { value: data } : { issues: [{ message: 'refused on purpose' }] };
        if (data.gate !== undefined) return this.until(data.gate).then(() => result);
        if (data.hops === 0) return result;
        let settled = Promise.resolve();
        for (let i = 0; i < data.hops; i++) settled = settled.then(() => undefined);
        return settled.then(() => result);
      },
    },
  };

  until(gate: string): Promise<void> {
    let opened = this.opened.get(gate);
    if (!opened) {
      opened = new Promise<void>((resolve) => this.open.set(gate, resolve));
      this.opened.set(gate, opened);
    }
    return opened;
  }

  openAll(): void {
    for (const open of this.open.values()) open();
    this.open.clear();
    this.opened.clear();
  }
}

interface Checked {
  ok: boolean;
  /** Held until the test opens this gate. */
  gate?: string;
  /** Microtask hops before an ungated check answers (0: synchronously). */
  hops: number;
}

/** Settles like `work`, or with 'still pending' after `ms` (a bound on a wait for a condition, not a sleep). */
function within<T>(work: Promise<T>, ms: number): Promise<T | 'still pending'> {
  return Promise.race([work, new Promise<'still pending'>((resolve) => setTimeout(() => resolve('still pending'), ms).unref())]);
}

/** Where order is promised: one key, or the keyless events of one partition. */
function laneOf(input: { key?: string; partition?: number }): string {
  return input.key !== undefined ? `key ${input.key}` : `partition ${input.partition ?? 0}`;
}

describe('a publish waiting for its schema check holds only the calls that must stay behind it', () => {
  const prefix = uniquePrefix('call-lanes');
  const keys = new EventrailKeys(prefix, PARTITIONS);
  const gates = new Gates();
  const Gated = defineEvent('audit.gated', gates.schema);
  let app: INestApplicationContext;
  let publisher: EventrailPublisher;
  let redis: Redis;

  beforeAll(async () => {
    redis = new Redis(testRedisUrl());
    app = await createApp({ prefix, partitions: PARTITIONS });
    publisher = app.get(EventrailPublisher);
  });
  afterEach(() => gates.openAll());
  afterAll(async () => {
    await app.close();
    await deletePrefix(redis, prefix);
    redis.disconnect();
  });

  /** Every entry of the log, in each partition's order: its id and its lane. */
  async function landed(): Promise<Array<{ id: string; lane: string }>> {
    const all: Array<{ id: string; lane: string }> = [];
    for (let partition = 0; partition < PARTITIONS; partition++) {
      for (const [offset, fields] of await redis.xrange(keys.stream(partition), '-', '+')) {
        const entry = readEntry(offset, fields, { partition, logTag: keys.logTag }) as { id: string; key: string | null };
        all.push({ id: entry.id, lane: laneOf({ key: entry.key ?? undefined, partition }) });
      }
    }
    return all;
  }

  async function clear(): Promise<void> {
    for (let partition = 0; partition < PARTITIONS; partition++) await redis.del(keys.stream(partition));
  }

  it('does not hold a later publish of another key and event', async () => {
    await clear();
    const held = publisher.publish(Gated, { ok: true, gate: 'a', hops: 0 }, { key: 'tenant-a' });
    const other = publisher.publish('payment.completed', { n: 2 }, { key: 'tenant-b' });
    expect(await within(other, 5_000)).toMatchObject({ offset: expect.any(String) });
    expect(await within(held, 0)).toBe('still pending');
    gates.openAll();
    expect(await held).toMatchObject({ offset: expect.any(String) });
  });

  it('does not hold another key of the same partition', async () => {
    await clear();
    const a = 'tenant-a';
    const b = ['tenant-b', 'tenant-c', 'tenant-d', 'tenant-e'].find(
      (other) => partitionForKey(other, PARTITIONS) === partitionForKey(a, PARTITIONS),
    ) as string;
    expect(partitionForKey(a, PARTITIONS)).toBe(partitionForKey(b, PARTITIONS));
    const held = publisher.publish(Gated, { ok: true, gate: 'a', hops: 0 }, { key: a });
    expect(await within(publisher.publish('payment.completed', {}, { key: b }), 5_000)).toMatchObject({ offset: expect.any(String) });
    gates.openAll();
    await held;
  });

  it('does not hold a later publishMany of other keys, nor keyless events of another partition', async () => {
    await clear();
    const held = publisher.publish(Gated, { ok: true, gate: 'a', hops: 0 }, { partition: 0 });
    const many = publisher.publishMany([{ event: 'payment.completed', data: { n: 3 }, key: 'tenant-c' }]);
    expect(await within(many, 5_000)).toHaveLength(1);
    const keyless = publisher.publish('payment.completed', {}, { partition: 1 });
    expect(await within(keyless, 5_000)).toMatchObject({ partition: 1 });
    // The keyless events of partition 0 stay behind it.
    const behind = publisher.publish('payment.completed', { after: true }, { partition: 0 });
    expect(await within(behind, 0)).toBe('still pending');
    gates.openAll();
    await Promise.all([held, behind]);
    expect((await landed()).filter((entry) => entry.lane === 'partition 0')).toHaveLength(2);
  });

  it('over 200 generated sequences of keys and partitions: only calls sharing a lane with a held call wait, and each lane lands in call order', async () => {
    const keyPool = ['k1', 'k2', 'k3', 'k4', 'k5'];
    for (let seed = 1; seed <= 200; seed++) {
      await clear();
      const random = seededRandom(seed);
      const pick = <T>(items: T[]): T => items[Math.floor(random() * items.length)];

      interface Call {
        seq: number;
        inputs: Array<PublishInput & { data: Checked; id: string }>;
        many: boolean;
      }
      const calls: Call[] = Array.from({ length: 4 + Math.floor(random() * 14) }, (_, seq) => {
        const many = random() < 0.25;
        const count = many ? 1 + Math.floor(random() * 3) : 1;
        const inputs = Array.from({ length: count }, (_, j) => {
          const roll = random();
          const data: Checked = { ok: random() > 0.15, hops: roll < 0.5 ? 0 : Math.floor(random() * 5) };
          if (roll > 0.75) data.gate = `g${seq}.${j}`;
          const where = random() < 0.75 ? { key: pick(keyPool) } : { partition: Math.floor(random() * PARTITIONS) };
          // A plain name has no schema: accepted at once, whatever `ok` says.
          const plain = data.gate === undefined && random() < 0.2;
          return { event: plain ? 'audit.gated' : Gated, data, id: `s${seed}-c${seq}-e${j}`, ...where };
        });
        return { seq, inputs, many };
      });

      // A check that refuses before any check of the call is pending rejects the call at once: it takes no place.
      const refusedAtOnce = (call: Call): boolean => {
        for (const { event, data } of call.inputs) {
          if (typeof event === 'string') continue;
          if (data.gate !== undefined || data.hops > 0) return false;
          if (!data.ok) return true;
        }
        return false;
      };
      // The model: a call is held by a gate of its own, or by an earlier held call that shares a lane with it.
      const heldLanes = new Set<string>();
      const held = calls.map((call) => {
        if (refusedAtOnce(call)) return false;
        const lanes = call.inputs.map(laneOf);
        const isHeld = call.inputs.some((input) => input.data.gate !== undefined) || lanes.some((lane) => heldLanes.has(lane));
        if (isHeld) lanes.forEach((lane) => heldLanes.add(lane));
        return isHeld;
      });
      const accepted = (call: Call): boolean => call.inputs.every((input) => input.data.ok || typeof input.event === 'string');

      const settled = calls.map(() => false);
      const outcomes = calls.map((call, i) => {
        const { event, data, ...options } = call.inputs[0];
        const sent = call.many ? publisher.publishMany(call.inputs) : publisher.publish(event, data, options);
        const outcome = Promise.allSettled([sent]).then(([result]) => result);
        void outcome.then(() => (settled[i] = true));
        return outcome;
      });
      const context = `seed ${seed}: ${JSON.stringify(calls.map((call, i) => ({ held: held[i], inputs: call.inputs })))}`;

      // Every call that nothing holds settles while the gates stay shut.
      const free = outcomes.filter((_, i) => !held[i]);
      const freeSettled = await within(Promise.all(free), 5_000);
      expect({ context, freeSettled: freeSettled !== 'still pending' }).toEqual({ context, freeSettled: true });
      const heldSettled = calls.filter((_, i) => held[i] && settled[i]).map((call) => call.seq);
      expect({ context, heldSettled }).toEqual({
        context,
        heldSettled: [],
      });
      const freeIds = calls.filter((call, i) => !held[i] && accepted(call)).flatMap((call) => call.inputs.map((input) => input.id));
      expect({ context, landed: (await landed()).map((entry) => entry.id).sort() }).toEqual({ context, landed: [...freeIds].sort() });

      gates.openAll();
      const results = await Promise.all(outcomes);
      calls.forEach((call, i) => {
        const status = accepted(call) ? 'fulfilled' : 'rejected';
        expect({ context, seq: call.seq, status: results[i].status }).toEqual({ context, seq: call.seq, status });
        if (status === 'rejected') expect((results[i] as PromiseRejectedResult).reason).toBeInstanceOf(EventValidationError);
      });
      // Per lane, what landed is the accepted calls' events in call order.
      const entries = await landed();
      const lanes = new Set(calls.flatMap((call) => call.inputs.map(laneOf)));
      for (const lane of lanes) {
        const expected = calls
          .filter(accepted)
          .flatMap((call) => call.inputs)
          .filter((input) => laneOf(input) === lane)
          .map((input) => input.id);
        const got = entries.filter((entry) => entry.lane === lane).map((entry) => entry.id);
        expect({ context, lane, got }).toEqual({ context, lane, got: expected });
      }
    }
  });
});
