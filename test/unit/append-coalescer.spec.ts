import { AppendCoalescer, AppendReply } from '../../lib/publisher/append-coalescer';

/** A coalescer whose sends record what they were given and answer with `reply(item)`. */
function recording(reply: (item: number) => AppendReply = (item) => [null, `offset-${item}`]) {
  const sent: Array<{ kind: 'one' | 'many'; items: number[] }> = [];
  const coalescer = new AppendCoalescer<number>(
    (item) => {
      sent.push({ kind: 'one', items: [item] });
      const [error, value] = reply(item);
      return error ? Promise.reject(error) : Promise.resolve(value);
    },
    (items) => {
      sent.push({ kind: 'many', items });
      return Promise.resolve(items.map(reply));
    },
  );
  return { coalescer, sent };
}

describe('AppendCoalescer', () => {
  it('sends the appends queued in one tick together, in order, and answers each caller with its own reply', async () => {
    const { coalescer, sent } = recording();
    const replies = await Promise.all(Array.from({ length: 100 }, (_, i) => coalescer.add(i)));
    expect(sent).toEqual([{ kind: 'many', items: Array.from({ length: 100 }, (_, i) => i) }]);
    expect(replies).toEqual(Array.from({ length: 100 }, (_, i) => `offset-${i}`));
  });

  it('sends a lone append on its own, without a pipeline', async () => {
    const { coalescer, sent } = recording();
    expect(await coalescer.add(7)).toBe('offset-7');
    expect(sent).toEqual([{ kind: 'one', items: [7] }]);
  });

  it('gathers the callers a reply wakes up into the next batch', async () => {
    const { coalescer, sent } = recording();
    const caller = async (first: number): Promise<void> => {
      await coalescer.add(first);
      await coalescer.add(first + 10);
    };
    await Promise.all([caller(1), caller(2), caller(3)]);
    expect(sent).toEqual([
      { kind: 'many', items: [1, 2, 3] },
      { kind: 'many', items: [11, 12, 13] },
    ]);
  });

  it('rejects only the callers whose append failed, and every caller of a batch that failed as a whole', async () => {
    const failing = recording((item) => (item === 2 ? [new Error('OOM'), null] : [null, `offset-${item}`]));
    const settled = await Promise.allSettled([1, 2, 3].map((i) => failing.coalescer.add(i)));
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);

    const broken = new AppendCoalescer<number>(
      () => Promise.reject(new Error('down')),
      () => Promise.reject(new Error('down')),
    );
    const all = await Promise.allSettled([broken.add(1), broken.add(2)]);
    expect(all.every((s) => s.status === 'rejected' && (s.reason as Error).message === 'down')).toBe(true);
  });

  it('flush() sends what is queued at once, so an append sent another way afterwards cannot overtake it', async () => {
    const { coalescer, sent } = recording();
    const queued = [coalescer.add(1), coalescer.add(2)];
    coalescer.flush();
    sent.push({ kind: 'one', items: [99] }); // stands for a publishMany sent right after
    await Promise.all(queued);
    expect(sent).toEqual([
      { kind: 'many', items: [1, 2] },
      { kind: 'one', items: [99] },
    ]);
  });
});
