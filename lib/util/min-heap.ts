/**
 * A binary min-heap: the smallest item (by `less`) in O(1), push and pop in O(log n). The users keep
 * stale items in it and skip them when they reach the top (lazy deletion), which is cheaper than
 * finding and removing an item that changed.
 */
export class MinHeap<T> {
  private items: T[] = [];

  constructor(private readonly less: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(item: T): void {
    const items = this.items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.less(items[i], items[parent])) break;
      [items[i], items[parent]] = [items[parent], items[i]];
      i = parent;
    }
  }

  pop(): T | undefined {
    const items = this.items;
    if (items.length === 0) return undefined;
    const top = items[0];
    const last = items.pop()!;
    if (items.length > 0) {
      items[0] = last;
      this.sink(0);
    }
    return top;
  }

  /** Keeps only the items `keep` accepts (drops the stale ones when they outnumber the live ones). */
  filter(keep: (item: T) => boolean): void {
    this.items = this.items.filter(keep);
    for (let i = (this.items.length >> 1) - 1; i >= 0; i--) this.sink(i);
  }

  private sink(from: number): void {
    const items = this.items;
    let i = from;
    for (;;) {
      const left = 2 * i + 1;
      const right = left + 1;
      let least = i;
      if (left < items.length && this.less(items[left], items[least])) least = left;
      if (right < items.length && this.less(items[right], items[least])) least = right;
      if (least === i) return;
      [items[i], items[least]] = [items[least], items[i]];
      i = least;
    }
  }
}
