import { DERIVED_ID_PARTITIONS, derivedEventId, logTag } from '../../lib/wire/event-id';
import { compareStreamIds } from '../../lib/wire/stream-id';
import { seededRandom } from '../support/seeded-random';

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const TAG = logTag('eventrail');

/** The layout the README documents, built bit by bit with BigInt: what `derivedEventId` must equal. */
function reference(tag: string, partition: number, streamId: string): string {
  const [ms, seq] = streamId.split('-').map(BigInt);
  const s = seq % 2n ** 32n;
  let value = ms % 2n ** 48n;
  value = (value << 4n) | 7n;
  value = (value << 10n) | BigInt(partition);
  value = (value << 2n) | (s >> 30n);
  value = (value << 2n) | 2n;
  value = (value << 30n) | (s & (2n ** 30n - 1n));
  value = (value << 32n) | BigInt(`0x${tag}`);
  const hex = value.toString(16).padStart(32, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Stream ids as Redis gives them, and the edges: seq 0, seq near 2^32, a millisecond near 2^48, tiny explicit ids. */
function generatedPositions(count: number, seed: number): Array<[partition: number, streamId: string]> {
  const random = seededRandom(seed);
  const int = (below: number): number => Math.floor(random() * below);
  const positions: Array<[number, string]> = [];
  const seen = new Set<string>();
  const add = (partition: number, streamId: string): void => {
    if (seen.has(`${partition}/${streamId}`)) return;
    seen.add(`${partition}/${streamId}`);
    positions.push([partition, streamId]);
  };
  for (const id of ['0-0', '0-1', '1-0', '1-1', '1700000000000-0', `${2 ** 48 - 1}-${2 ** 32 - 1}`, `1700000000000-${2 ** 32 - 1}`])
    for (const partition of [0, 1, DERIVED_ID_PARTITIONS - 1]) add(partition, id);
  while (positions.length < count) {
    const ms = random() < 0.1 ? int(1000) : 1_600_000_000_000 + int(400_000_000_000);
    const seq = random() < 0.8 ? int(50) : random() < 0.5 ? int(2 ** 20) : int(2 ** 32);
    add(int(DERIVED_ID_PARTITIONS), `${ms}-${seq}`);
  }
  return positions;
}

describe('derived event ids', () => {
  const positions = generatedPositions(10_000, 13);

  it('are valid UUIDv7 strings laid out as documented, for every generated position', () => {
    const wrong = positions.filter(([partition, streamId]) => {
      const id = derivedEventId(TAG, partition, streamId);
      return !UUID_V7.test(id) || id !== reference(TAG, partition, streamId);
    });
    expect(wrong).toEqual([]);
  });

  it('are stable: the same position gives the same id however often and in whatever order it is read', () => {
    const first = positions.map(([partition, streamId]) => derivedEventId(TAG, partition, streamId));
    const again = [...positions].reverse().map(([partition, streamId]) => derivedEventId(TAG, partition, streamId));
    expect(again.reverse()).toEqual(first);
  });

  it('are unique within a log: no two positions share one, the same stream id in two partitions included', () => {
    const ids = new Set(positions.map(([partition, streamId]) => derivedEventId(TAG, partition, streamId)));
    expect(ids.size).toBe(positions.length);
    const sameId = Array.from({ length: DERIVED_ID_PARTITIONS }, (_, partition) => derivedEventId(TAG, partition, '1700000000000-5'));
    expect(new Set(sameId).size).toBe(DERIVED_ID_PARTITIONS);
  });

  it('start with the stream id milliseconds, so within a partition they sort like the stream ids', () => {
    const wrongTime = positions.filter(([partition, streamId]) => {
      const ms = BigInt(streamId.split('-')[0]) % 2n ** 48n;
      return BigInt(`0x${derivedEventId(TAG, partition, streamId).replace(/-/g, '').slice(0, 12)}`) !== ms;
    });
    expect(wrongTime).toEqual([]);
    const inPartition = positions.filter(([partition]) => partition === positions[100][0]).map(([, streamId]) => streamId);
    const byStreamId = [...inPartition].sort(compareStreamIds).map((streamId) => derivedEventId(TAG, positions[100][0], streamId));
    expect([...byStreamId].sort()).toEqual(byStreamId);
  });

  it('match the example in the README', () => {
    expect(logTag('eventrail')).toBe('f6c80167');
    expect(derivedEventId(TAG, 0, '1700000000000-3')).toBe('018bcfe5-6800-7000-8000-0003f6c80167');
    expect(derivedEventId(TAG, 1, '1700000000000-3')).toBe('018bcfe5-6800-7004-8000-0003f6c80167');
  });

  it('differ between logs: another prefix gives the same position another id', () => {
    expect(logTag('eventrail')).toMatch(/^[0-9a-f]{8}$/);
    expect(logTag('orders')).not.toBe(logTag('eventrail'));
    expect(derivedEventId(logTag('orders'), 0, '1700000000000-0')).not.toBe(derivedEventId(TAG, 0, '1700000000000-0'));
  });
});
