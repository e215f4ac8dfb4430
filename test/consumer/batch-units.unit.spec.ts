import type { EventrailMessage } from '../../lib';
import { InvalidBatchResultError } from '../../lib';
import { reportedFailures } from '../../lib/consumer/handling/batch-result';
import { formUnits, type Route } from '../../lib/consumer/handling/batch-units';

const ledger = { maxSize: 3 };
const audit = { maxSize: 10 };

describe('formUnits', () => {
  it('groups consecutive entries of one batch handler, at most maxSize each', () => {
    const routes: Array<Route<typeof ledger>> = [ledger, ledger, ledger, ledger, ledger];
    expect(formUnits(routes)).toEqual([
      { indexes: [0, 1, 2], batch: ledger },
      { indexes: [3, 4], batch: ledger },
    ]);
  });

  it('ends a batch at an entry run on its own or of another batch handler, not at one passed over', () => {
    const routes: Array<Route<{ maxSize: number }>> = [ledger, 'skip', ledger, 'single', ledger, audit, audit, 'skip'];
    expect(formUnits(routes)).toEqual([
      { indexes: [0, 2], batch: ledger },
      { indexes: [3] },
      { indexes: [4], batch: ledger },
      { indexes: [5, 6], batch: audit },
    ]);
  });

  it('keeps one batch across the events of one batch handler (one binding per event, the same call)', () => {
    const book = (): void => undefined;
    const entry = { maxSize: 3, call: book };
    const closing = { maxSize: 3, call: book };
    const other = { maxSize: 3, call: (): void => undefined };
    const routes: Array<Route<{ maxSize: number; call: () => void }>> = [entry, closing, entry, closing, other];
    expect(formUnits(routes)).toEqual([
      { indexes: [0, 1, 2], batch: entry },
      { indexes: [3], batch: closing },
      { indexes: [4], batch: other },
    ]);
  });

  it('gives nothing for a fetch passed over entirely', () => {
    expect(formUnits(['skip', 'skip'])).toEqual([]);
  });
});

describe('reportedFailures', () => {
  const messages = [1, 2, 3].map((n) => ({ offset: `${n}-0`, data: { n } }) as unknown as EventrailMessage);

  it('takes nothing, or an empty failed list, as the whole batch handled', () => {
    expect(reportedFailures('L.book', undefined, messages).size).toBe(0);
    expect(reportedFailures('L.book', { failed: [] }, messages).size).toBe(0);
  });

  it('names failed messages by index in log order, by identity or by offset', () => {
    const error = new Error('refused');
    const failures = reportedFailures(
      'L.book',
      {
        failed: [
          { message: { ...messages[2] }, error },
          { message: messages[0], error },
        ],
      },
      messages,
    );
    expect([...failures.keys()]).toEqual([0, 2]);
    expect(failures.get(2)).toBe(error);
  });

  it('gives a failure without an error one that says so', () => {
    expect(String(reportedFailures('L.book', { failed: [{ message: messages[1] }] }, messages).get(1))).toMatch(/without an error/);
  });

  it('refuses what is not a BatchResult of this batch with InvalidBatchResultError', () => {
    expect(() => reportedFailures('L.book', 42, messages)).toThrow(InvalidBatchResultError);
    expect(() => reportedFailures('L.book', { failed: 'all' }, messages)).toThrow(/L\.book returned an invalid BatchResult/);
    expect(() => reportedFailures('L.book', { failed: [{ message: { offset: '9-0' } }] }, messages)).toThrow(/not in the batch/);
    expect(() => reportedFailures('L.book', { failed: [null] }, messages)).toThrow(InvalidBatchResultError);
  });
});
