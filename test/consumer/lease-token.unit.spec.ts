import { followsOwnLease } from '../../lib/consumer/coordination/lease';

describe('followsOwnLease: a lease taken right after this worker’s own lapsed one', () => {
  const me = 'host-a:1234:k3j2';

  it('is true for the next epoch of the same worker', () => {
    expect(followsOwnLease(`${me}:41`, `${me}:42`)).toBe(true);
  });

  it('is false when another holder came between (a later epoch than the next one)', () => {
    expect(followsOwnLease(`${me}:40`, `${me}:42`)).toBe(false);
  });

  it('is false when the previous token was another worker’s, even on the same host and pid (another run)', () => {
    expect(followsOwnLease('host-a:1234:zz99:41', `${me}:42`)).toBe(false);
  });

  it('is false when this worker held no lease of the partition before', () => {
    expect(followsOwnLease(undefined, `${me}:1`)).toBe(false);
  });
});
