import { ReadTally } from '../../lib/consumer/pipeline/read-tally';

const entries = (...offsets: string[]): Array<{ offset: string }> => offsets.map((offset) => ({ offset }));

describe('ReadTally', () => {
  it('counts what each commit moves over, across batches', () => {
    const tally = new ReadTally('0-0');
    tally.took('0-0', entries('1-0', '2-0', '3-0'));
    tally.took('3-0', entries('5-0', '8-0'));
    expect(tally.advance('2-0')).toMatchObject({ since: '0-0', from: '1-0', count: 2 }); // a low watermark mid-batch
    expect(tally.advance('8-0')).toMatchObject({ since: '2-0', from: '3-0', count: 3 });
    tally.took('8-0', entries('9-0'));
    expect(tally.advance('9-0')).toMatchObject({ since: '8-0', from: '9-0', count: 1 });
  });

  it('replaces what followed an entry read again (a restart from the watermark)', () => {
    const tally = new ReadTally('10-0');
    tally.took('10-0', entries('11-0', '12-0', '13-0'));
    tally.took('11-0', entries('12-0', '13-0', '14-0'));
    expect(tally.advance('14-0')).toMatchObject({ since: '10-0', from: '11-0', count: 4 });
  });

  it('knows nothing for an offset it never saw, or a read from somewhere it cannot place, and recovers at the next commit', () => {
    const tally = new ReadTally('1-0');
    tally.took('1-0', entries('2-0', '3-0'));
    expect(tally.advance('2-5')).toBeUndefined(); // not an entry it read
    tally.took('2-5', entries('3-0'));
    expect(tally.advance('3-0')).toMatchObject({ since: '2-5', from: '3-0', count: 1 });
    tally.took('7-0', entries('8-0')); // not after anything known
    expect(tally.advance('8-0')).toBeUndefined();
  });

  it('never moves its base backwards', () => {
    const tally = new ReadTally('5-0');
    tally.took('5-0', entries('6-0', '7-0'));
    expect(tally.advance('4-0')).toBeUndefined();
    expect(tally.advance('5-0')).toBeUndefined();
    expect(tally.advance('7-0')).toMatchObject({ since: '5-0', from: '6-0', count: 2 });
  });

  it('asks for a check of the position on its first commit and then at most once per interval', () => {
    const rarely = new ReadTally('0-0', 60_000);
    rarely.took('0-0', entries('1-0', '2-0', '3-0'));
    expect(rarely.advance('1-0')?.verify).toBe(true);
    expect(rarely.advance('2-0')?.verify).toBe(false);
    expect(rarely.advance('3-0')?.verify).toBe(false);
    const always = new ReadTally('0-0', 0);
    always.took('0-0', entries('1-0', '2-0'));
    expect([always.advance('1-0')?.verify, always.advance('2-0')?.verify]).toEqual([true, true]);
  });
});
