import { groupWants } from '../../lib/consumer/coordination/group-wants';

const info = (events?: string[]): string => JSON.stringify({ host: 'h', pid: 1, startedAt: 0, heartbeatTtlMs: 1000, events });

describe('groupWants gaps', () => {
  it('a renamed handler: neither version is able, and each member is named with what it lacks', () => {
    const details = { v1: info(['refund.issued']), v2: info(['refund.created']) };
    const wants = groupWants(['v1', 'v2'], details, 'v1', new Set(['refund.issued']));
    expect(wants.able).toEqual([]);
    expect(wants.gaps).toEqual({ v1: ['refund.created'], v2: ['refund.issued'] });
  });

  it('a type held for a member gone without leaving is wanted, and a member without it lacks it', () => {
    const wants = groupWants(['v1'], { v1: info(['a']) }, 'v1', new Set(['a']), ['b']);
    expect(wants).toMatchObject({ wanted: ['a', 'b'], able: [], lacking: ['b'], gaps: { v1: ['b'] } });
  });

  it('no gaps when every live member handles the union', () => {
    expect(groupWants(['a', 'b'], { a: info(['x']), b: info(['x']) }, 'a', new Set(['x'])).gaps).toEqual({});
  });
});
