import { wantedUntilPassed, type WantSample } from './want-sampler';

const sample = (at: number, wanted: boolean, committed: string, parked: string[] = []): WantSample => ({
  at,
  wanted,
  committed: [committed],
  parked: [parked],
});

describe('wantedUntilPassed', () => {
  it('is true when every reading from the publish until the offset passed the entry says a live member wanted it', () => {
    const samples = [sample(90, true, '50-0'), sample(140, true, '90-0'), sample(190, true, '100-3')];
    expect(wantedUntilPassed(samples, 0, '100-2', 100)).toBe(true);
  });

  it('is false when nobody live wanted it at some reading before the group passed it (the wanter was frozen or gone)', () => {
    const samples = [sample(90, true, '50-0'), sample(140, false, '90-0'), sample(190, false, '100-3')];
    expect(wantedUntilPassed(samples, 0, '100-2', 100)).toBe(false);
  });

  it('ignores readings after the pass, and compares stream ids by number, not as text', () => {
    const samples = [sample(90, true, '9-0'), sample(140, true, '100-10'), sample(190, false, '200-0')];
    expect(wantedUntilPassed(samples, 0, '100-9', 100)).toBe(true);
    expect(wantedUntilPassed(samples, 0, '100-11', 100)).toBe(false);
  });

  it('is false without a reading before the publish (nothing says it was wanted)', () => {
    expect(wantedUntilPassed([sample(140, true, '100-3')], 0, '100-2', 100)).toBe(false);
  });

  it('judges a parked entry when its line lets it go, not when the committed offset moved past it', () => {
    // Parked while wanted (the offset moves on at once), then its only wanter froze past its heartbeat,
    // and a member without its handler released the line: nobody live wanted it then.
    const samples = [
      sample(90, true, '50-0'),
      sample(140, true, '100-5', ['100-2']),
      sample(190, false, '100-5', ['100-2']),
      sample(240, false, '100-9'),
    ];
    expect(wantedUntilPassed(samples, 0, '100-2', 100)).toBe(false);
    // Released (redelivered and handled) while still wanted: the later readings do not count.
    const handled = [
      sample(90, true, '50-0'),
      sample(140, true, '100-5', ['100-2']),
      sample(190, true, '100-5'),
      sample(240, false, '100-9'),
    ];
    expect(wantedUntilPassed(handled, 0, '100-2', 100)).toBe(true);
  });
});
