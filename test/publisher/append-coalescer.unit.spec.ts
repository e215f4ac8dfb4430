import { AppendCoalescer, AppendReply } from '../../lib/publisher/append-coalescer';

/** The deadline the timer tests give their coalescers: no other timer of the process has it. */
const DEADLINE_MS = 60_000;

/**
 * Watches the timers armed with `DEADLINE_MS` from now on: `live()` counts those armed and not cleared.
 * Only those: counting every timer of the process (Node's handles) failed on a loaded CI run, when a timer
 * of something else in the process came up during the test (6 before, 7 after).
 */
function watchDeadlineTimers(): { live(): number; restore(): void } {
  const armed = jest.spyOn(global, 'setTimeout');
  const cleared = jest.spyOn(global, 'clearTimeout');
  return {
    live() {
      const ours = armed.mock.calls.flatMap((call, i) => (call[1] === DEADLINE_MS ? [armed.mock.results[i].value as unknown] : []));
      const gone = new Set(cleared.mock.calls.map((call) => call[0] as unknown));
      return ours.filter((timer) => !gone.has(timer)).length;
    },
    restore() {
      armed.mockRestore();
      cleared.mockRestore();
    },
  };
}

/** Settles on a later turn of the event loop, as a reply from Redis does (never within the tick that sent). */
const later = <T>(value: () => T): Promise<T> =>
  new Promise((resolve, reject) =>
    setImmediate(() => {
      try {
        resolve(value());
      } catch (error) {
        reject(error);
      }
    }),
  );

/** A coalescer whose sends record what they were given and answer with `reply(item)`. */
function recording(reply: (item: number) => AppendReply = (item) => [null, `offset-${item}`]) {
  const sent: Array<{ kind: 'one' | 'many'; items: number[] }> = [];
  const coalescer = new AppendCoalescer<number>(
    (item) => {
      sent.push({ kind: 'one', items: [item] });
      return later(() => {
        const [error, value] = reply(item);
        if (error) throw error;
        return value;
      });
    },
    (items) => {
      sent.push({ kind: 'many', items });
      return later(() => items.map(reply));
    },
  );
  return { coalescer, sent };
}

describe('AppendCoalescer', () => {
  it('sends the first append of a tick at once and the ones after it together, in order, answering each caller with its own reply', async () => {
    const { coalescer, sent } = recording();
    const pending = Array.from({ length: 100 }, (_, i) => coalescer.add(i));
    // The first left during its own call, before the tick ended; the others wait for the tick's end.
    expect(sent).toEqual([{ kind: 'one', items: [0] }]);
    const replies = await Promise.all(pending);
    expect(sent).toEqual([
      { kind: 'one', items: [0] },
      { kind: 'many', items: Array.from({ length: 99 }, (_, i) => i + 1) },
    ]);
    expect(replies).toEqual(Array.from({ length: 100 }, (_, i) => `offset-${i}`));
  });

  it('sends a lone append on its own, at once, without a pipeline', async () => {
    const { coalescer, sent } = recording();
    const reply = coalescer.add(7);
    expect(sent).toEqual([{ kind: 'one', items: [7] }]);
    expect(await reply).toBe('offset-7');
    // A later tick's first append goes at once again.
    const next = coalescer.add(8);
    expect(sent).toEqual([
      { kind: 'one', items: [7] },
      { kind: 'one', items: [8] },
    ]);
    await next;
  });

  it('gathers the callers a reply wakes up into the next batch', async () => {
    const { coalescer, sent } = recording();
    const caller = async (first: number): Promise<void> => {
      await coalescer.add(first);
      await coalescer.add(first + 10);
    };
    await Promise.all([caller(1), caller(2), caller(3), caller(4)]);
    // Each reply wakes its callers on a turn of its own: 1's alone, then 2, 3 and 4 together, whose first goes at once.
    expect(sent).toEqual([
      { kind: 'one', items: [1] },
      { kind: 'many', items: [2, 3, 4] },
      { kind: 'one', items: [11] },
      { kind: 'one', items: [12] },
      { kind: 'many', items: [13, 14] },
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
    const queued = [coalescer.add(1), coalescer.add(2), coalescer.add(3)];
    coalescer.flush();
    sent.push({ kind: 'one', items: [99] }); // stands for a publishMany sent right after
    await Promise.all(queued);
    expect(sent).toEqual([
      { kind: 'one', items: [1] },
      { kind: 'many', items: [2, 3] },
      { kind: 'one', items: [99] },
    ]);
  });

  it("rejects an append without an answer by its deadline with the deadline's error, and leaves the answered ones of its tick alone", async () => {
    const answered = new Set([1, 3]);
    const coalescer = new AppendCoalescer<number>(
      // 2 never gets an answer, as over a connection that drops packets.
      (item) => (answered.has(item) ? later(() => `offset-${item}`) : new Promise(() => undefined)),
      (items) => later(() => items.map((item): AppendReply => [null, `offset-${item}`])),
      (write) => {
        write();
        return true;
      },
      { ms: 20, timedOut: () => new Error('no answer in time') },
    );
    const settled = await Promise.allSettled([1, 2, 3].map((i) => coalescer.add(i)));
    expect(settled).toEqual([
      { status: 'fulfilled', value: 'offset-1' },
      { status: 'rejected', reason: new Error('no answer in time') },
      { status: 'fulfilled', value: 'offset-3' },
    ]);
  });

  it('bounds the appends of one tick with one timer, cleared once the last of them is answered', async () => {
    const timers = watchDeadlineTimers();
    let answer: () => void = () => undefined;
    const replies = new Promise<void>((resolve) => (answer = resolve));
    const coalescer = new AppendCoalescer<number>(
      async (item) => {
        await replies;
        return `offset-${item}`;
      },
      async () => [],
      (write) => {
        write();
        return true;
      },
      { ms: DEADLINE_MS, timedOut: () => new Error('no answer in time') },
    );
    try {
      const pending = Array.from({ length: 100 }, (_, i) => coalescer.add(i));
      await new Promise((resolve) => setImmediate(resolve)); // the tick has ended: its timer is armed
      expect(timers.live()).toBe(1);
      answer();
      await expect(Promise.all(pending)).resolves.toHaveLength(100);
      expect(timers.live()).toBe(0);
    } finally {
      timers.restore();
    }
  });

  it('rejects an append whose send throws, without a crash or a timer left behind', async () => {
    const timers = watchDeadlineTimers();
    const coalescer = new AppendCoalescer<number>(
      () => {
        throw new Error('cannot send');
      },
      async () => [],
      (write) => {
        write();
        return true;
      },
      { ms: DEADLINE_MS, timedOut: () => new Error('no answer in time') },
    );
    try {
      const settled = await Promise.allSettled([coalescer.add(1), coalescer.add(2)]);
      expect(settled.map((s) => s.status === 'rejected' && (s.reason as Error).message)).toEqual(['cannot send', 'cannot send']);
      await new Promise((resolve) => setImmediate(resolve));
      expect(timers.live()).toBe(0);
    } finally {
      timers.restore();
    }
  });

  it("answers each caller as `answers` turn its reply or its error, the deadline's included", async () => {
    const coalescer = new AppendCoalescer<number, string>(
      (item) =>
        item === 3 ? new Promise(() => undefined) : later(() => (item === 2 ? Promise.reject(new Error('refused')) : `offset-${item}`)),
      async () => [],
      (write) => {
        write();
        return true;
      },
      { ms: 20, timedOut: () => new Error('no answer in time') },
      {
        answer: (item, reply) => `${item} at ${String(reply)}`,
        failure: (item, error) => new Error(`${item}: ${(error as Error).message}`),
      },
    );
    const settled = await Promise.allSettled([1, 2, 3].map((i) => coalescer.add(i)));
    expect(settled).toEqual([
      { status: 'fulfilled', value: '1 at offset-1' },
      { status: 'rejected', reason: new Error('2: refused') },
      { status: 'rejected', reason: new Error('3: no answer in time') },
    ]);
  });

  describe('sendTogether, for a tick of more than 128 appends', () => {
    /** A coalescer whose `sendTogether` records each part and answers it as `part(items, index)` says. */
    function together(part: (items: number[], index: number) => Promise<ReadonlyArray<unknown>> | undefined) {
      const sent: Array<{ kind: 'one' | 'many' | 'together'; items: number[] }> = [];
      let parts = 0;
      const coalescer = new AppendCoalescer<number>(
        (item) => {
          sent.push({ kind: 'one', items: [item] });
          return later(() => `offset-${item}`);
        },
        (items) => {
          sent.push({ kind: 'many', items });
          return later(() => items.map((item): AppendReply => [null, `offset-${item}`]));
        },
        undefined,
        undefined,
        undefined,
        (items) => {
          const answer = part(items, parts++);
          if (answer) sent.push({ kind: 'together', items });
          return answer;
        },
      );
      return { coalescer, sent };
    }
    const range = (from: number, to: number): number[] => Array.from({ length: to - from }, (_, i) => from + i);

    it.each([2, 128, 129, 300, 1000])(
      'sends a tick of %i queued appends as parts of at most 128, in order, each caller answered from its part',
      async (count) => {
        const { coalescer, sent } = together((items) => later(() => items.map((item) => `offset-${item}`)));
        const replies = await Promise.all(range(0, count + 1).map((i) => coalescer.add(i)));
        expect(replies).toEqual(range(0, count + 1).map((i) => `offset-${i}`));
        const parts = sent.slice(1);
        expect(sent[0]).toEqual({ kind: 'one', items: [0] });
        expect(parts.every((p) => p.kind === 'together' && p.items.length <= 128)).toBe(true);
        expect(parts.length).toBe(Math.ceil(count / 128));
        expect(parts.flatMap((p) => p.items)).toEqual(range(1, count + 1));
      },
    );

    it('a part refused whole rejects its own callers only; an error reply rejects its one caller', async () => {
      const { coalescer } = together((items, index) =>
        later(() => {
          if (index === 1) throw new Error('EXECABORT');
          return items.map((item) => (item === 5 ? new Error('WRONGTYPE') : `offset-${item}`));
        }),
      );
      const settled = await Promise.allSettled(range(0, 301).map((i) => coalescer.add(i)));
      const rejected = settled.flatMap((s, i) => (s.status === 'rejected' ? [i] : []));
      // 0 went alone; part 0 holds 1..128, part 1 (refused) 129..256, part 2 257..300.
      expect(rejected).toEqual([5, ...range(129, 257)]);
      expect((settled[5] as PromiseRejectedResult).reason).toEqual(new Error('WRONGTYPE'));
      expect((settled[200] as PromiseRejectedResult).reason).toEqual(new Error('EXECABORT'));
    });

    it('where a part cannot go together (nothing sent), it and the rest of the tick go one by one behind the parts sent', async () => {
      const { coalescer, sent } = together((items, index) =>
        index === 1 ? undefined : later(() => items.map((item) => `offset-${item}`)),
      );
      const replies = await Promise.all(range(0, 301).map((i) => coalescer.add(i)));
      expect(replies).toEqual(range(0, 301).map((i) => `offset-${i}`));
      expect(sent.map((p) => p.kind)).toEqual(['one', 'together', 'many']);
      expect(sent[1].items).toEqual(range(1, 129));
      expect(sent[2].items).toEqual(range(129, 301));
    });
  });
});
