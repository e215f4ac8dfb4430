import { CommitQueue } from '../../lib/consumer/pipeline/commit-queue';
import { seededRandom } from '../support/seeded-random';

/** A commit sender whose commits settle only when the test says so. */
function manualSender() {
  const sent: Array<{ mark: string; doneIds: string[]; settle: (ok: boolean) => void }> = [];
  const send = (mark: string, doneIds: readonly string[]): Promise<boolean> =>
    new Promise((resolve) => sent.push({ mark, doneIds: [...doneIds], settle: resolve }));
  return { sent, send };
}

const settled = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('CommitQueue', () => {
  it('sends a commit at once, and merges the marks that come while it is in flight into one next commit', async () => {
    const { sent, send } = manualSender();
    const queue = new CommitQueue(send, 0);
    queue.push('1-0', ['a']);
    expect(sent.map((c) => c.mark)).toEqual(['1-0']);
    queue.push('2-0', ['b']);
    queue.push('3-0', []);
    queue.push('4-0', ['c', 'd']);
    expect(sent).toHaveLength(1);
    sent[0].settle(true);
    await settled();
    expect(sent.map((c) => [c.mark, c.doneIds])).toEqual([
      ['1-0', ['a']],
      ['4-0', ['b', 'c', 'd']],
    ]);
    sent[1].settle(true);
    expect(await queue.flush()).toBe(true);
  });

  it('pending() names exactly the asked ids whose marks are queued or in flight, over generated pushes and landings', async () => {
    const probe = Array.from({ length: 30 }, (_, i) => `id-${i}`);
    for (let seed = 1; seed <= 40; seed++) {
      const random = seededRandom(seed);
      const { sent, send } = manualSender();
      const queue = new CommitQueue(send, 0);
      // The model: the ids of the commit in flight (undefined: none), and of what waits behind it.
      let inFlight: Set<string> | undefined;
      let queued: Set<string> | undefined;
      for (let step = 0; step < 80; step++) {
        if (random() < 0.6) {
          const ids = Array.from({ length: Math.floor(random() * 4) }, () => probe[Math.floor(random() * probe.length)]);
          queue.push(`${step + 1}-0`, ids);
          if (!inFlight) inFlight = new Set(ids);
          else {
            // A push while one is in flight queues a commit, ids or none.
            queued ??= new Set();
            for (const id of ids) queued.add(id);
          }
        } else if (inFlight) {
          sent[sent.length - 1].settle(true);
          await settled();
          [inFlight, queued] = [queued, undefined];
        }
        const expected = probe.filter((id) => inFlight?.has(id) || queued?.has(id));
        expect({ seed, step, pending: queue.pending(probe) }).toEqual({ seed, step, pending: expected });
      }
    }
  });

  it('holds a commit back for the spacing, and flush() sends it at once and settles when it landed', async () => {
    const { sent, send } = manualSender();
    const queue = new CommitQueue(send, 60_000);
    queue.push('1-0', []);
    sent[0].settle(true);
    await settled();
    queue.push('2-0', ['x']);
    await settled();
    expect(sent).toHaveLength(1); // the spacing has not passed
    const flushed = queue.flush();
    expect(sent.map((c) => c.mark)).toEqual(['1-0', '2-0']);
    sent[1].settle(true);
    expect(await flushed).toBe(true);
  });

  it('flush() waits for the commit in flight, then sends what is queued without the spacing', async () => {
    const { sent, send } = manualSender();
    const queue = new CommitQueue(send, 60_000);
    queue.push('1-0', []);
    queue.push('2-0', []);
    const flushed = queue.flush();
    sent[0].settle(true);
    await settled();
    expect(sent.map((c) => c.mark)).toEqual(['1-0', '2-0']);
    sent[1].settle(true);
    expect(await flushed).toBe(true);
  });

  it('sends nothing more after a failed commit, and says so', async () => {
    const { sent, send } = manualSender();
    const queue = new CommitQueue(send, 0);
    queue.push('1-0', []);
    queue.push('2-0', []);
    const flushed = queue.flush();
    sent[0].settle(false);
    expect(await flushed).toBe(false);
    queue.push('3-0', []);
    await settled();
    expect(sent).toHaveLength(1);
    expect(await queue.flush()).toBe(false);
  });

  it('cancel() drops what is queued: a lost lease commits nothing more', async () => {
    const { sent, send } = manualSender();
    const queue = new CommitQueue(send, 60_000);
    queue.push('1-0', []);
    sent[0].settle(true);
    await settled();
    queue.push('2-0', []);
    queue.cancel();
    expect(await queue.flush()).toBe(false);
    expect(sent).toHaveLength(1);
  });

  it('flush() with nothing sent settles at once', async () => {
    expect(await new CommitQueue(() => Promise.resolve(true), 5).flush()).toBe(true);
  });
});
