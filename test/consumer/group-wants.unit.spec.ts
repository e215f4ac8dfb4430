import { groupWants } from '../../lib/consumer/coordination/group-wants';
import { seededRandom } from '../support/seeded-random';

const info = (events?: string[]): string => JSON.stringify({ host: 'h', pid: 1, startedAt: 0, heartbeatTtlMs: 1000, events });

describe('groupWants', () => {
  it('a v1 member next to a v2 member that adds a handler lacks it; the v2 member is the only able one', () => {
    const details = { v1: info(['order.placed']), v2: info(['order.placed', 'refund.issued']) };
    expect(groupWants(['v1', 'v2'], details, 'v1', new Set(['order.placed']))).toEqual({
      wanted: ['order.placed', 'refund.issued'],
      able: ['v2'],
      lacking: ['refund.issued'],
      gaps: { v1: ['refund.issued'] },
    });
    expect(groupWants(['v1', 'v2'], details, 'v2', new Set(['order.placed', 'refund.issued'])).lacking).toEqual([]);
  });

  it('counts live members only: a gone member that wanted a type leaves it wanted by nobody', () => {
    const details = { v1: info(['order.placed']), gone: info(['order.placed', 'refund.issued']) };
    expect(groupWants(['v1'], details, 'v1', new Set(['order.placed']))).toEqual({
      wanted: ['order.placed'],
      able: ['v1'],
      lacking: [],
      gaps: {},
    });
  });

  it('a member without an event list (an older version) adds nothing and counts as able; unreadable details too', () => {
    const details = { old: JSON.stringify({ host: 'h' }), bad: '{', v1: info(['a']) };
    expect(groupWants(['bad', 'old', 'v1'], details, 'v1', new Set(['a']))).toEqual({
      wanted: ['a'],
      able: ['bad', 'old', 'v1'],
      lacking: [],
      gaps: {},
    });
  });

  it('members with disjoint sets are none of them able (both yield: nothing is skipped)', () => {
    const details = { a: info(['x']), b: info(['y']) };
    expect(groupWants(['a', 'b'], details, 'a', new Set(['x']))).toEqual({
      wanted: ['x', 'y'],
      able: [],
      lacking: ['y'],
      gaps: { a: ['y'], b: ['x'] },
    });
  });

  it('over 500 generated groups: a member is able exactly when it handles the union of the live sets, and able members cover that union', () => {
    const types = ['a', 'b', 'c', 'd'];
    for (let seed = 1; seed <= 500; seed++) {
      const random = seededRandom(seed);
      const members = Array.from({ length: 1 + Math.floor(random() * 5) }, (_, i) => `m${i}`);
      const sets = new Map(members.map((m) => [m, types.filter(() => random() < 0.6)]));
      const live = members.filter(() => random() < 0.8);
      const self = live[0] ?? members[0];
      const details = Object.fromEntries(members.map((m) => [m, info(sets.get(m))]));
      const result = groupWants(live, details, self, new Set(sets.get(self)));
      const union = new Set([...live, self].flatMap((m) => sets.get(m) ?? []));
      expect({ seed, wanted: result.wanted }).toEqual({ seed, wanted: [...union].sort() });
      for (const m of live)
        expect({ seed, m, able: result.able.includes(m) }).toEqual({ seed, m, able: [...union].every((t) => sets.get(m)!.includes(t)) });
      expect({ seed, lacking: result.lacking }).toEqual({ seed, lacking: [...union].filter((t) => !sets.get(self)!.includes(t)).sort() });
    }
  });
});
