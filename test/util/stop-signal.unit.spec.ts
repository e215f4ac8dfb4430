import { StopSignal } from '../../lib/util/stop-signal';

describe('StopSignal: calls that ended while nothing halted', () => {
  it('keeps an offset only while the halting condition does not hold, and not after the signal fired', () => {
    let halted = false;
    const stop = new StopSignal(() => halted);
    stop.noteEnded('1-0');
    halted = true;
    stop.noteEnded('2-0');
    halted = false;
    stop.fire();
    stop.noteEnded('3-0');
    expect([...stop.endedWhileHeld]).toEqual(['1-0']);
  });

  it('keeps the most recent 1024 offsets, an offset noted again counting as recent', () => {
    const stop = new StopSignal();
    for (let i = 0; i < 1024; i++) stop.noteEnded(`${i}-0`);
    stop.noteEnded('0-0');
    stop.noteEnded('1024-0');
    const kept = [...stop.endedWhileHeld];
    expect(kept).toHaveLength(1024);
    expect(kept).not.toContain('1-0');
    expect(kept.slice(-2)).toEqual(['0-0', '1024-0']);
  });
});
