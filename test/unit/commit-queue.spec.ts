import { CommitQueue } from '../../lib/consumer/commit-queue';

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
