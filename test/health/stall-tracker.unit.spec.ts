import type { GroupStatus } from '../../lib/admin/admin.types';
import { evaluateGroup } from '../../lib/health/group-health';
import { StallTracker } from '../../lib/health/stall-tracker';

describe('StallTracker', () => {
  let now = 0;
  const tracker = (): StallTracker => new StallTracker(() => now);
  beforeEach(() => (now = 1_000));

  it('measures how long a partition with lag has kept its committed offset, from the first check that saw it', () => {
    const stalls = tracker();
    expect(stalls.observe('g', [{ partition: 0, committed: '5-0', lag: 3 }])).toEqual([
      { partition: 0, committed: '5-0', lag: 3, forMs: 0 },
    ]);
    now += 400;
    expect(stalls.observe('g', [{ partition: 0, committed: '5-0', lag: 7 }])).toEqual([
      { partition: 0, committed: '5-0', lag: 7, forMs: 400 },
    ]);
    // The offset moved: the clock starts again, whatever the lag does.
    now += 400;
    expect(stalls.observe('g', [{ partition: 0, committed: '6-0', lag: 9 }])).toEqual([
      { partition: 0, committed: '6-0', lag: 9, forMs: 0 },
    ]);
  });

  it('forgets a partition without lag (waiting for events is not being stuck), and groups no longer consumed', () => {
    const stalls = tracker();
    stalls.observe('g', [{ partition: 0, committed: '5-0', lag: 3 }]);
    now += 400;
    expect(stalls.observe('g', [{ partition: 0, committed: '5-0', lag: 0 }])).toEqual([]);
    now += 400;
    expect(stalls.observe('g', [{ partition: 0, committed: '5-0', lag: 1 }])[0].forMs).toBe(0);

    stalls.observe('h', [{ partition: 1, committed: null, lag: 2 }]);
    now += 100;
    stalls.retain(['g']);
    expect(stalls.observe('h', [{ partition: 1, committed: null, lag: 2 }])[0].forMs).toBe(0);
    expect(stalls.observe('g', [{ partition: 0, committed: '5-0', lag: 1 }])[0].forMs).toBe(100);
  });

  it('keeps groups and partitions apart', () => {
    const stalls = tracker();
    stalls.observe('g', [
      { partition: 0, committed: '1-0', lag: 1 },
      { partition: 1, committed: '1-0', lag: 1 },
    ]);
    now += 50;
    stalls.observe('h', [{ partition: 0, committed: '1-0', lag: 1 }]);
    now += 50;
    const g = stalls.observe('g', [
      { partition: 0, committed: '1-0', lag: 1 },
      { partition: 1, committed: '2-0', lag: 1 },
    ]);
    expect(g.map((s) => [s.partition, s.forMs])).toEqual([
      [0, 100],
      [1, 0],
    ]);
    expect(stalls.observe('h', [{ partition: 0, committed: '1-0', lag: 1 }])[0].forMs).toBe(50);
  });
});

describe('evaluateGroup with maxStallMs', () => {
  const status: GroupStatus = {
    name: 'g',
    events: ['e'],
    members: [{ workerId: 'w', host: null, pid: null, startedAt: null, lastHeartbeat: null, expiresAt: new Date(0) }],
    partitions: [0, 1].map((partition) => ({
      partition,
      committed: '7-0',
      lag: partition === 1 ? 4 : 0,
      lagCapped: false,
      leaseOwner: 'w',
      leaseExpiresInMs: 1000,
      parked: 0,
      oldestParked: null,
    })),
    lag: 4,
    parked: 0,
    deadLetters: 0,
    lastSeen: null,
  };
  const local = { running: true, workerId: 'w', ownedHere: [0, 1] };
  const standstill = (forMs: number) => [{ partition: 1, committed: '7-0', lag: 4, forMs }];

  it('is down, naming the partition, once the standstill is longer than maxStallMs; up at or under it', () => {
    expect(evaluateGroup(status, local, { maxStallMs: 500 }, standstill(501))).toMatchObject({
      status: 'down',
      stalled: [1],
      problems: ['partition 1 stalled: committed offset 7-0 has not moved for 501 ms (maxStallMs 500) while 4 entries wait'],
    });
    expect(evaluateGroup(status, local, { maxStallMs: 500 }, standstill(500))).toMatchObject({ status: 'up', stalled: [] });
  });

  it('does not judge standstills without maxStallMs', () => {
    expect(evaluateGroup(status, local, {}, standstill(1e9))).toMatchObject({ status: 'up', stalled: [] });
  });
});
