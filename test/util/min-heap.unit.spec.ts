import { MinHeap } from '../../lib/util/min-heap';
import { seededRandom } from '../support/seeded-random';

describe('MinHeap', () => {
  it('pops items smallest first, against a sort of the same items (generated)', () => {
    const random = seededRandom(11);
    const heap = new MinHeap<number>((a, b) => a < b);
    const kept: number[] = [];
    for (let i = 0; i < 5_000; i++) {
      if (random() < 0.6 || kept.length === 0) {
        const value = Math.floor(random() * 1_000);
        heap.push(value);
        kept.push(value);
      } else {
        kept.sort((a, b) => a - b);
        expect(heap.peek()).toBe(kept[0]);
        expect(heap.pop()).toBe(kept.shift());
      }
      expect(heap.size).toBe(kept.length);
    }
    kept.sort((a, b) => a - b);
    const rest: number[] = [];
    for (let item = heap.pop(); item !== undefined; item = heap.pop()) rest.push(item);
    expect(rest).toEqual(kept);
  });

  it('keeps heap order after a filter', () => {
    const heap = new MinHeap<number>((a, b) => a < b);
    for (const value of [9, 3, 7, 1, 8, 2, 6, 4, 5]) heap.push(value);
    heap.filter((value) => value % 2 === 0);
    expect([heap.pop(), heap.pop(), heap.pop(), heap.pop(), heap.pop()]).toEqual([2, 4, 6, 8, undefined]);
  });
});
