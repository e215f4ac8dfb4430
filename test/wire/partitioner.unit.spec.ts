import { fnv1a32, partitionForKey } from '../../lib/wire/partitioner';

describe('partitionForKey', () => {
  it('matches the published FNV-1a 32-bit test vectors', () => {
    expect(fnv1a32('')).toBe(0x811c9dc5);
    expect(fnv1a32('a')).toBe(0xe40c292c);
    expect(fnv1a32('foobar')).toBe(0xbf9cf968);
  });

  it('hashes UTF-8 bytes, so other languages pick the same partition', () => {
    // "é" is 0xC3 0xA9 in UTF-8.
    const expected = Math.imul(Math.imul(0x811c9dc5 ^ 0xc3, 0x01000193) ^ 0xa9, 0x01000193) >>> 0;
    expect(fnv1a32('é')).toBe(expected);
  });

  it('is stable and within range', () => {
    for (let i = 0; i < 1000; i++) {
      const p = partitionForKey(`order-${i}`, 12);
      expect(p).toBeGreaterThanOrEqual(0);
      expect(p).toBeLessThan(12);
      expect(partitionForKey(`order-${i}`, 12)).toBe(p);
    }
    expect(partitionForKey('anything', 1)).toBe(0);
  });

  it('spreads keys over partitions', () => {
    const counts = new Array(8).fill(0);
    for (let i = 0; i < 8000; i++) counts[partitionForKey(`user:${i}`, 8)]++;
    for (const c of counts) expect(c).toBeGreaterThan(800);
  });
});
