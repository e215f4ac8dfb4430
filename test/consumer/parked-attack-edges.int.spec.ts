import { Injectable, INestApplicationContext } from '@nestjs/common';
import Redis from 'ioredis';
import { EventrailAdmin, EventrailMessage, EventrailModuleOptions, EventrailPublisher, EventrailRetention, OnEvent } from '../../lib';
import { EventrailKeys } from '../../lib/redis/keys';
import { createApp } from '../support/app';
import { deletePrefix, testRedisUrl, uniquePrefix, waitFor } from '../support/helpers';

type Data = { key: string | null; n: number };

/** Per message name: how many more calls fail (Infinity: until told), and how long a call takes. */
const dependency = {
  failures: new Map<string, number>(),
  slowMs: new Map<string, number>(),
  calls: [] as string[],
  handled: [] as string[],
  async call(message: EventrailMessage<Data>): Promise<void> {
    const name = `${message.data.key ?? '-'}${message.data.n}`;
    this.calls.push(name);
    const slow = this.slowMs.get(name);
    if (slow) await new Promise((resolve) => setTimeout(resolve, slow));
    const left = this.failures.get(name) ?? 0;
    if (left > 0) {
      this.failures.set(name, left - 1);
      throw new Error(`${name} fails`);
    }
    this.handled.push(name);
  },
};

const TIERS = {
  maxRetries: 1,
  retryBackoffMs: 20,
  retryBackoffMaxMs: 40,
  redelivery: { delayMs: 50, factor: 2, maxDelayMs: 100, maxAgeMs: 600_000 },
} as const;

@Injectable()
class ByKey {
  @OnEvent('account.changed', { group: 'edges', ordering: 'key', ...TIERS })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

@Injectable()
class NoBudget {
  @OnEvent('account.changed', { group: 'edges', ordering: 'key', ...TIERS, redelivery: { ...TIERS.redelivery, maxAgeMs: 0 } })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

/** Parked heads wait ten minutes: only an operator moves them. */
@Injectable()
class SlowTiers {
  @OnEvent('account.changed', {
    group: 'edges',
    ordering: 'key',
    maxRetries: 0,
    redelivery: { delayMs: 600_000, factor: 1, maxDelayMs: 600_000, maxAgeMs: 3_600_000 },
  })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

@Injectable()
class Concurrent {
  @OnEvent('account.changed', { group: 'edges', ordering: 'key', concurrency: 8, ...TIERS })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

@Injectable()
class BudgetByAge {
  @OnEvent('account.changed', { group: 'edges', ordering: 'key', ...TIERS, redelivery: undefined, maxRetryAgeMs: 400 })
  handle(message: EventrailMessage<Data>): Promise<void> {
    return dependency.call(message);
  }
}

/** All or nothing, as a transaction would be: a batch with a failing message records nothing. */
@Injectable()
class BatchByKey {
  @OnEvent('account.changed', { group: 'edges', ordering: 'key', batch: { maxSize: 10 }, ...TIERS })
  async handle(messages: EventrailMessage<Data>[]): Promise<void> {
    for (const message of messages) {
      const name = `${message.data.key ?? '-'}${message.data.n}`;
      dependency.calls.push(name);
      const left = dependency.failures.get(name) ?? 0;
      if (left > 0) {
        dependency.failures.set(name, left - 1);
        throw new Error(`${name} fails`);
      }
    }
    for (const message of messages) dependency.handled.push(`${message.data.key ?? '-'}${message.data.n}`);
  }
}

describe('parked keys under attack: odd settings and races', () => {
  let redis: Redis;
  let prefix: string;
  let keys: EventrailKeys;
  let app: INestApplicationContext | undefined;

  const start = async (provider: unknown, options: EventrailModuleOptions = {}): Promise<INestApplicationContext> => {
    app = await createApp({ prefix, ...options }, [provider as never]);
    return app;
  };
  const publish = (names: Array<[string | null, number]>, ids?: string[]) =>
    app!.get(EventrailPublisher).publishMany(
      names.map(([key, n], i) => ({
        event: 'account.changed',
        data: { key, n },
        ...(key !== null && { key }),
        ...(ids && { id: ids[i] }),
      })),
    );
  const parkedFields = async (): Promise<Record<string, { ids: string[] }>> => {
    const lines: Record<string, { ids: string[] }> = {};
    for (const [field, value] of Object.entries(await redis.hgetall(keys.recovery('edges', 0))))
      if (field.startsWith('park:')) lines[field] = JSON.parse(value) as { ids: string[] };
    return lines;
  };
  const handledOf = (key: string) => dependency.handled.filter((name) => name.startsWith(key));
  const callsOf = (name: string) => dependency.calls.filter((c) => c === name).length;

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
  });
  beforeEach(() => {
    prefix = uniquePrefix('parked-attack-edges');
    keys = new EventrailKeys(prefix, 1);
    Object.assign(dependency, { failures: new Map(), slowMs: new Map(), calls: [], handled: [] });
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await deletePrefix(redis, prefix);
  });
  afterAll(() => redis.disconnect());

  it('redelivery.maxAgeMs 0: a failing message is dead-lettered at once and the next message of its key goes on', async () => {
    await start(NoBudget);
    dependency.failures.set('A1', Infinity);
    await publish([
      ['A', 1],
      ['A', 2],
      ['B', 1],
    ]);
    await waitFor(() => handledOf('A').length === 1 && handledOf('B').length === 1, 'A2 and B1 handled');
    expect(await app!.get(EventrailAdmin).deadLetterCount('edges')).toBe(1);
    expect(callsOf('A1')).toBe(1);
    await waitFor(async () => Object.keys(await parkedFields()).length === 0, 'no line left');
  });

  it('a message parked behind the head that fails at its own first try is parked as the new head, and the next waits for it', async () => {
    await start(ByKey);
    dependency.failures.set('A1', 1);
    dependency.failures.set('A2', 3);
    await publish([
      ['A', 1],
      ['A', 2],
      ['A', 3],
      ['B', 1],
    ]);
    await waitFor(() => handledOf('A').length === 3, 'A handled');
    expect(handledOf('A')).toEqual(['A1', 'A2', 'A3']);
    expect(callsOf('A2')).toBe(4);
    expect(callsOf('A3')).toBe(1);
    await waitFor(async () => Object.keys(await parkedFields()).length === 0, 'no line left');
  });

  it('keyless events: a failing one parks the keyless sequence; keyed events go on; the sequence keeps its order', async () => {
    await start(ByKey);
    dependency.failures.set('-1', 3);
    await publish([
      [null, 1],
      ['A', 1],
      [null, 2],
      ['B', 1],
      [null, 3],
    ]);
    await waitFor(() => handledOf('-').length === 3 && handledOf('A').length === 1 && handledOf('B').length === 1, 'all handled');
    expect(handledOf('-')).toEqual(['-1', '-2', '-3']);
    expect(dependency.handled.indexOf('B1')).toBeLessThan(dependency.handled.indexOf('-1'));
  });

  it('idempotency: an event id published twice while its key is parked is handled once when the key is back', async () => {
    await start(ByKey, { consumer: { enableIdempotency: true } });
    dependency.failures.set('A1', 4);
    const id = '0190f1d2-3c4b-7a89-8b12-1234567890ab';
    await publish([['A', 1]], [id]);
    await waitFor(async () => Object.keys(await parkedFields()).length === 1, 'A1 parked');
    await publish([['A', 1]], [id]);
    await publish([['A', 2]]);
    await waitFor(() => handledOf('A').length === 2, 'A handled');
    await waitFor(async () => Object.keys(await parkedFields()).length === 0, 'no line left');
    expect(handledOf('A')).toEqual(['A1', 'A2']);
  });

  it('an operator gives a key up while its head is being redelivered and succeeds: it is handled or dead-lettered, never both, and the next message of the key is handled once', async () => {
    await start(SlowTiers);
    const names = Array.from({ length: 8 }, (_, i) => String.fromCharCode(65 + i));
    for (const key of names) {
      dependency.failures.set(`${key}1`, 1);
      dependency.slowMs.set(`${key}1`, 300);
    }
    await publish(names.flatMap((key) => [[key, 1] as [string, number], [key, 2] as [string, number]]));
    const admin = app!.get(EventrailAdmin);
    await waitFor(async () => (await admin.parkedKeys('edges')).length === names.length, 'every key parked');
    await admin.retryParked('edges');
    // Each head's redelivery is running now (300 ms, then success): give every key up meanwhile.
    const racing: Array<Promise<number>> = [];
    for (const key of names) {
      await waitFor(() => callsOf(`${key}1`) === 2, `a redelivery of ${key}1 running`, 20_000, 5);
      racing.push(admin.giveUpParked('edges', { key }));
    }
    await Promise.all(racing);
    await waitFor(() => names.every((key) => handledOf(key).includes(`${key}2`)), 'every second message handled');
    await waitFor(async () => Object.keys(await parkedFields()).length === 0, 'no line left');
    const letters = await admin.deadLetters('edges');
    for (const key of names) {
      const lettered = letters.filter((l) => (l.data as Data).n === 1 && l.key === key).length;
      const handled = handledOf(key).filter((name) => name === `${key}1`).length;
      expect([key, lettered + handled]).toEqual([key, 1]);
      expect([key, handledOf(key).filter((name) => name === `${key}2`).length]).toEqual([key, 1]);
    }
    expect(letters.filter((l) => (l.data as Data).n === 2)).toEqual([]);
  });

  it.each([0, 1])('retention maxLen %i keeps every parked message, also once the head has moved on', async (maxLen) => {
    await start(SlowTiers, { retention: { enabled: false, maxLen, approximate: false } });
    dependency.failures.set('A1', Infinity);
    dependency.failures.set('A2', Infinity);
    dependency.failures.set('C1', Infinity);
    const published = await publish([
      ['A', 1],
      ['B', 1],
      ['A', 2],
      ['C', 1],
      ['B', 2],
    ]);
    const admin = app!.get(EventrailAdmin);
    await waitFor(() => handledOf('B').length === 2, 'B handled');
    await waitFor(async () => (await admin.parkedKeys('edges')).length === 2, 'A and C parked');
    await app!.get(EventrailRetention).runOnce();
    // A1 given up: A2 becomes the head (and fails again); the floor moves from A1 to C1.
    await admin.giveUpParked('edges', { key: 'A' });
    await waitFor(async () => (await admin.deadLetterCount('edges')) === 1, 'A1 dead-lettered');
    await waitFor(() => callsOf('A2') === 1, 'A2 tried');
    await app!.get(EventrailRetention).runOnce();
    const left = (await redis.xrange(keys.stream(0), '-', '+')).map(([id]) => id);
    expect(left).toEqual(expect.arrayContaining([published[2].offset, published[3].offset]));
    dependency.failures.clear();
    await admin.retryParked('edges');
    await waitFor(() => handledOf('A').length === 1 && handledOf('C').length === 1, 'A2 and C1 handled');
  });

  it('concurrency 8: a slow head that fails in a fetch holds back the later messages of its key read in the same batch', async () => {
    await start(Concurrent);
    for (const key of ['A', 'C', 'D']) {
      dependency.failures.set(`${key}1`, 1);
      dependency.slowMs.set(`${key}1`, 150);
    }
    await publish(['A', 'B', 'C', 'D'].flatMap((key) => [1, 2, 3].map((n) => [key, n] as [string, number])));
    await waitFor(
      () => dependency.handled.length === 12,
      () => `all handled (${dependency.handled.join(',')})`,
    );
    for (const key of ['A', 'B', 'C', 'D']) expect(handledOf(key)).toEqual([`${key}1`, `${key}2`, `${key}3`]);
    for (const key of ['A', 'C', 'D']) expect(dependency.calls.indexOf(`${key}2`)).toBeGreaterThan(dependency.calls.lastIndexOf(`${key}1`));
  });

  it('maxRetryAgeMs set alone with ordering key bounds how long a parked head may fail', async () => {
    await start(BudgetByAge);
    dependency.failures.set('A1', Infinity);
    const t = Date.now();
    await publish([
      ['A', 1],
      ['A', 2],
    ]);
    await waitFor(() => handledOf('A').includes('A2'), 'A2 handled after A1 is given up', 10_000);
    expect(Date.now() - t).toBeLessThan(5_000);
    const letters = await app!.get(EventrailAdmin).deadLetters('edges');
    expect(letters.map((l) => l.reason)).toEqual(['retries-exhausted']);
  });

  it('batch handlers with idempotency: a failing message parks its key alone, an id published twice is handled once, each key in order', async () => {
    await start(BatchByKey, { consumer: { enableIdempotency: true } });
    dependency.failures.set('A2', 3);
    const ids = ['0190f1d2-3c4b-7a89-8b12-0000000000a1', '0190f1d2-3c4b-7a89-8b12-0000000000a2'];
    const names = ['A', 'B', 'C'].flatMap((key) => [1, 2, 3, 4].map((n) => [key, n] as [string, number]));
    await publish(
      names,
      names.map(([key, n]) =>
        key === 'A' && n <= 2 ? ids[n - 1] : `0190f1d2-3c4b-7a89-8b12-${String(key.charCodeAt(0)).padStart(10, '0')}0${n}`,
      ),
    );
    // A2 again, with its id, while A is parked.
    await waitFor(async () => Object.keys(await parkedFields()).length === 1, 'A parked');
    await publish([['A', 2]], [ids[1]]);
    await waitFor(() => handledOf('A').length >= 4 && handledOf('B').length === 4 && handledOf('C').length === 4, 'all handled');
    await waitFor(async () => Object.keys(await parkedFields()).length === 0, 'no line left');
    expect(handledOf('A')).toEqual(['A1', 'A2', 'A3', 'A4']);
    expect(handledOf('B')).toEqual(['B1', 'B2', 'B3', 'B4']);
    expect(handledOf('C')).toEqual(['C1', 'C2', 'C3', 'C4']);
  });
});
