import Redis from 'ioredis';
import { EventrailKeys } from '../../lib/redis/keys';
import { EventrailScripts } from '../../lib/redis/eventrail-scripts';
import { type EventrailClient, registerScripts } from '../../lib/redis/scripts';
import { deletePrefix, testRedisUrl, uniquePrefix } from '../support/helpers';

/**
 * appendMany-n, the run `publishMany` (and a tick of `publish` calls) sends
 * for events without ids: a run of one width goes without a count per event
 * and is checked in one step, so these hold its promises on both shapes:
 * every event appended in order with its offset, a malformed call writes
 * nothing, an XADD that fails part way reports the events before it, and a
 * guarded run lands only behind the runs of its call before it.
 */
describe('appendMany runs', () => {
  const prefix = uniquePrefix('append-runs');
  const keys = new EventrailKeys(prefix, 2);
  let redis: Redis;
  let client: EventrailClient;
  let facadeClient: Redis;
  let scripts: EventrailScripts;
  const stream = keys.stream(0);
  const entries = async (key = stream): Promise<Array<[string, string[]]>> => redis.xrange(key, '-', '+');

  beforeAll(() => {
    redis = new Redis(testRedisUrl());
    client = registerScripts(redis.duplicate());
    facadeClient = redis.duplicate();
    scripts = new EventrailScripts(facadeClient, keys);
  });

  beforeEach(() => redis.del(stream));

  afterAll(async () => {
    await deletePrefix(redis, prefix);
    redis.disconnect();
    client.disconnect();
    facadeClient.disconnect();
  });

  it('appends a run of one width, for each width, and a counted run, in order, answering every offset', async () => {
    const sent: string[][] = [];
    for (const width of [2, 4, 6]) {
      const events = [0, 1, 2].map((n) => Array.from({ length: width }, (_, i) => `${width}:${n}:${i}`));
      const [offsets, failure] = await scripts.appendMany({ partition: 0, events: events.flat(), width });
      expect(failure).toBeUndefined();
      expect(offsets).toHaveLength(3);
      expect((await entries()).slice(-3).map(([id]) => id)).toEqual(offsets);
      sent.push(...events);
    }
    const [offsets] = await scripts.appendMany({ partition: 0, events: [2, 'event', 'a', 4, 'event', 'b', 'data', '{}'] });
    sent.push(['event', 'a'], ['event', 'b', 'data', '{}']);
    const all = await entries();
    expect(all.map(([, fields]) => fields)).toEqual(sent);
    expect(all.slice(-2).map(([id]) => id)).toEqual(offsets);
  });

  it('refuses a malformed call with an error naming what is wrong, and writes nothing', async () => {
    const guard = keys.runGuard(0, 'malformed');
    const cases: Array<[number, Array<string | number>, string]> = [
      [1, [3, '', 'event', 'x', 'y'], 'malformed arguments at position 1'], // an odd width
      [1, [4, '', 'event', 'x', 'data', '{}', 'event', 'y'], 'malformed arguments at position 1'], // a width that does not divide the run
      [1, ['four', '', 'event', 'x', 'data', '{}'], 'malformed arguments at position 1'],
      [1, [-2, '', 'event', 'x'], 'malformed arguments at position 1'],
      [1, [7002, '', ...Array.from({ length: 3501 }, (_, i) => [`f${i}`, 'v']).flat()], 'malformed arguments at position 1'],
      [1, [0, '', 2, 'event', 'x', 3, 'a', 'b', 'c'], 'malformed arguments at position 6'],
      [2, [guard, 2, '', 'one', '1', 60_000, 'event', 'x'], 'malformed guard arguments'],
      [2, [guard, 2, '', 0, '2', 60_000, 'event', 'x'], 'malformed guard arguments'],
      [2, [guard, 2, '', 0, '1', 0, 'event', 'x'], 'malformed guard arguments'],
    ];
    for (const [numberOfKeys, args, message] of cases) {
      await expect(client.eventrailAppendMany(numberOfKeys + 2, stream, keys.bigEntries(0), keys.indexedFrom(0), ...args)).rejects.toThrow(
        `appendMany: ${message}`,
      );
    }
    expect(await redis.exists(stream, guard)).toBe(0);
  });

  it('reports the events appended before an XADD that failed part way, and the error', async () => {
    // Two ids left before the stream's last possible one: the third XADD of the run is refused.
    for (const [events, width] of [
      [['event', 'a', 'event', 'b', 'event', 'c'], 2],
      [[2, 'event', 'a', 2, 'event', 'b', 2, 'event', 'c'], 0],
    ] as Array<[Array<string | number>, number]>) {
      await redis.del(stream);
      await redis.xadd(stream, '18446744073709551615-18446744073709551613', 'event', 'seed');
      const [offsets, failure] = await scripts.appendMany({ partition: 0, events, width });
      expect(offsets).toEqual(['18446744073709551615-18446744073709551614', '18446744073709551615-18446744073709551615']);
      expect(failure).toMatch(/exhausted the last possible ID/);
      expect((await entries()).map(([, fields]) => fields[1])).toEqual(['seed', 'a', 'b']);
    }
    // A failure on the first event: nothing appended, the error said.
    await redis.set(keys.stream(1), 'not a stream');
    expect(await scripts.appendMany({ partition: 1, events: ['event', 'a'], width: 2 })).toEqual([[], expect.stringMatching(/^WRONGTYPE/)]);
  });

  it('appends a guarded run only when every earlier run of its call in the partition was done', async () => {
    const call = 'guarded';
    const guardKey = keys.runGuard(0, call);
    const run = (runsBefore: number, more: boolean, ...values: string[]): Promise<[string[], string?]> =>
      scripts.appendMany({
        partition: 0,
        events: values.flatMap((v) => ['n', v]),
        width: 2,
        guard: { call, runsBefore, more, ttlMs: 60_000 },
      });
    const appended = async (): Promise<string[]> => (await entries()).map(([, f]) => f[1]);
    // Three runs of one call: each sets the guard for the next; the last deletes it.
    expect((await run(0, true, 'a1', 'a2'))[0]).toHaveLength(2);
    expect(await redis.get(guardKey)).toBe('1');
    expect(await redis.pttl(guardKey)).toBeGreaterThan(50_000);
    expect((await run(1, true, 'a3'))[0]).toHaveLength(1);
    expect((await run(2, false, 'a4'))[0]).toHaveLength(1);
    expect(await redis.exists(guardKey)).toBe(0);
    expect(await appended()).toEqual(['a1', 'a2', 'a3', 'a4']);
    // A later run whose earlier run never set the guard (refused, failed, or lost) appends nothing.
    expect(await run(1, false, 'b2')).toEqual([[], expect.stringMatching(/^GUARDED /)]);
    // One whose guard says fewer runs were done than it follows, neither.
    await redis.set(guardKey, '1');
    expect(await run(2, false, 'c3')).toEqual([[], expect.stringMatching(/^GUARDED /)]);
    // A run that fails part way deletes the guard: the runs after it append nothing.
    await redis.set(guardKey, '1');
    await redis.xadd(stream, '18446744073709551615-18446744073709551614', 'n', 'seed');
    const failing = await run(1, true, 'd1', 'd2');
    expect(failing).toEqual([['18446744073709551615-18446744073709551615'], expect.stringMatching(/exhausted the last possible ID/)]);
    expect(await redis.exists(guardKey)).toBe(0);
    expect(await run(2, false, 'd3')).toEqual([[], expect.stringMatching(/^GUARDED /)]);
    expect(await appended()).toEqual(['a1', 'a2', 'a3', 'a4', 'seed', 'd1']);
  });
});
