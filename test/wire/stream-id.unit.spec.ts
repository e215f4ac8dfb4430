import { compareStreamIds, isStreamId, offsetBeforeTime, previousStreamId } from '../../lib/wire/stream-id';
import { newEventId } from '../../lib/wire/event-id';
import { retryDelayMs } from '../../lib/util/backoff';

describe('stream ids', () => {
  it('finds the id just before another', () => {
    expect(previousStreamId('5-3')).toBe('5-2');
    expect(previousStreamId('5-0')).toBe('4-18446744073709551615');
    expect(previousStreamId('0-0')).toBe('0-0');
    expect(offsetBeforeTime(new Date(1000))).toBe('999-18446744073709551615');
  });

  it('compares numerically, beyond double precision', () => {
    expect(compareStreamIds('10-0', '9-5')).toBe(1);
    expect(compareStreamIds('9-18446744073709551615', '9-18446744073709551614')).toBe(1);
    expect(compareStreamIds('1-1', '1-1')).toBe(0);
    expect(compareStreamIds('1-1', '1-2')).toBe(-1);
  });

  it('orders any two ids as their numbers do, leading zeros included (generated pairs)', () => {
    // A small deterministic generator: parts of 1-20 digits, some with leading zeros, some equal.
    let seed = 7;
    const next = (n: number): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    const part = (): string => {
      if (next(8) === 0) return '0';
      const digits = Array.from({ length: 1 + next(20) }, () => String(next(10))).join('');
      return next(6) === 0 ? `0${digits}` : digits.replace(/^0+(?=\d)/, '') || '0';
    };
    const sign = (x: bigint): number => (x === 0n ? 0 : x < 0n ? -1 : 1);
    for (let i = 0; i < 5000; i++) {
      const a = `${part()}-${part()}`;
      const b = next(5) === 0 ? a : next(3) === 0 ? `${a.split('-')[0]}-${part()}` : `${part()}-${part()}`;
      const [am, as] = a.split('-').map(BigInt);
      const [bm, bs] = b.split('-').map(BigInt);
      const expected = am !== bm ? sign(am - bm) : sign(as - bs);
      expect([a, b, compareStreamIds(a, b)]).toEqual([a, b, expected]);
      expect(compareStreamIds(b, a)).toBe(expected === 0 ? 0 : -expected);
    }
  });

  it('accepts only complete ids whose parts fit in 64 bits, as Redis does', () => {
    expect(isStreamId('1700000000000-0')).toBe(true);
    expect(isStreamId('18446744073709551615-18446744073709551615')).toBe(true);
    expect(isStreamId('18446744073709551616-0')).toBe(false);
    expect(isStreamId('99999999999999999999-0')).toBe(false);
    expect(isStreamId('1-18446744073709551616')).toBe(false);
    for (const bad of ['1700000000000', '-1-0', '1-', 'a-b', ' 1-0', 42, null]) expect(isStreamId(bad)).toBe(false);
  });
});

describe('event ids', () => {
  it('are UUIDv7 that sort by time', () => {
    const a = newEventId(1_700_000_000_000);
    const b = newEventId(1_700_000_000_001);
    expect(a).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(a < b).toBe(true);
    expect(parseInt(a.replace(/-/g, '').slice(0, 12), 16)).toBe(1_700_000_000_000);
    expect(newEventId()).not.toBe(newEventId());
  });
});

describe('retry backoff', () => {
  it('doubles from the base, is capped, and jitters within the upper half', () => {
    expect(retryDelayMs(1, 1000, 30000, () => 0)).toBe(500);
    expect(retryDelayMs(1, 1000, 30000, () => 1)).toBe(1000);
    expect(retryDelayMs(3, 1000, 30000, () => 1)).toBe(4000);
    expect(retryDelayMs(10, 1000, 30000, () => 1)).toBe(30000);
    expect(retryDelayMs(10, 1000, 30000, () => 0)).toBe(15000);
  });
});
