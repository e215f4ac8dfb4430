import type { GroupStatus, PartitionStatus } from '../../lib';
import { groupLag, isRegistered, parkedIn } from '../../lib/metrics/group-lag';

const partition = (p: number, lag: number, extra: Partial<PartitionStatus> = {}): PartitionStatus => ({
  partition: p,
  committed: '1-0',
  lag,
  lagCapped: false,
  leaseOwner: null,
  leaseExpiresInMs: null,
  parked: 0,
  oldestParked: null,
  ...extra,
});

const status = (partitions: PartitionStatus[], members = 0): GroupStatus => ({
  name: 'billing',
  events: ['order.placed'],
  members: Array.from({ length: members }, (_, i) => ({
    workerId: `w${i}`,
    host: null,
    pid: null,
    startedAt: null,
    lastHeartbeat: null,
    expiresAt: new Date(),
  })),
  partitions,
  lag: partitions.reduce((sum, p) => sum + p.lag, 0),
  parked: partitions.reduce((sum, p) => sum + p.parked, 0),
  deadLetters: 2,
  lastSeen: null,
});

describe('groupLag', () => {
  it('sums lag, counts the partitions with work as the useful workers, and never more than the partitions', () => {
    expect(groupLag(status([partition(0, 5), partition(1, 0), partition(2, 3), partition(3, 0)], 3))).toEqual({
      group: 'billing',
      lag: 8,
      lagCapped: false,
      parked: 0,
      parkedOldestAgeMs: 0,
      backlog: 8,
      members: 3,
      partitions: 4,
      usefulWorkers: 2,
      deadLetters: 2,
    });
    const busy = groupLag(status([partition(0, 1_000_000), partition(1, 7)]));
    expect([busy.usefulWorkers, busy.partitions]).toEqual([2, 2]);
    expect(groupLag(status([partition(0, 0), partition(1, 0)]))).toMatchObject({ lag: 0, backlog: 0, usefulWorkers: 0 });
  });

  it('counts parked messages as work: in the backlog and in the useful workers', () => {
    expect(parkedIn(partition(0, 0))).toBe(0);
    const head = { key: 'A', offset: '1-0', firstFailedAt: new Date(0), failingForMs: 9_000 };
    const older = { ...head, key: 'B', failingForMs: 12_000 };
    const lag = groupLag(
      status([partition(0, 0, { parked: 4, oldestParked: head }), partition(1, 2), partition(2, 0, { parked: 1, oldestParked: older })]),
    );
    expect(lag).toMatchObject({ lag: 2, parked: 5, backlog: 7, usefulWorkers: 3, parkedOldestAgeMs: 12_000 });
  });

  it('says when a count stopped at its cap, so the lag is a lower bound', () => {
    expect(groupLag(status([partition(0, 10_000, { lagCapped: true }), partition(1, 1)])).lagCapped).toBe(true);
  });
});

describe('isRegistered', () => {
  it('holds for a group with event types or a live member, and not for a name with nothing behind it', () => {
    expect(isRegistered(status([partition(0, 0)]))).toBe(true);
    expect(isRegistered({ ...status([partition(0, 0)], 1), events: [] })).toBe(true);
    expect(isRegistered({ ...status([partition(0, 51, { committed: null })]), events: [] })).toBe(false);
  });
});
