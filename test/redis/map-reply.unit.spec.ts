import { mapReply, scoredReply } from '../../lib/redis/map-reply';

describe('mapReply', () => {
  it('reads a map reply as ioredis gives it under either reply mapping, and nothing from what is not one', () => {
    const expected = new Map<string, unknown>([
      ['length', 3],
      ['first-entry', ['1-0', ['event', 'e']]],
      ['entries-added', 3],
    ]);
    // RESP2, or RESP3 under the default 'legacy' mapping: a flat array.
    expect(mapReply(['length', 3, 'first-entry', ['1-0', ['event', 'e']], 'entries-added', 3])).toEqual(expected);
    // replyMapping 'resp3': a plain object.
    expect(mapReply({ length: 3, 'first-entry': ['1-0', ['event', 'e']], 'entries-added': 3 })).toEqual(expected);
    // An odd array keeps its whole pairs; what is not a map gives no fields.
    expect(mapReply(['maxmemory-policy', 'noeviction', 'dangling'])).toEqual(new Map([['maxmemory-policy', 'noeviction']]));
    for (const nothing of [null, undefined, 'OK', 7]) expect(mapReply(nothing).size).toBe(0);
  });
});

describe('scoredReply', () => {
  it('reads ZRANGE WITHSCORES as ioredis gives it under either reply mapping', () => {
    const expected = new Map([
      ['worker-a', 1700000000000],
      ['worker-b', 1700000005000.5],
    ]);
    // RESP2, or RESP3 under 'legacy': flat, scores as strings.
    expect(scoredReply(['worker-a', '1700000000000', 'worker-b', '1700000005000.5'])).toEqual(expected);
    // replyMapping 'resp3': pairs, scores as numbers.
    expect(
      scoredReply([
        ['worker-a', 1700000000000],
        ['worker-b', 1700000005000.5],
      ]),
    ).toEqual(expected);
    for (const nothing of [[], null, undefined, 'x']) expect(scoredReply(nothing).size).toBe(0);
  });
});
