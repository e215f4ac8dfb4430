import { DATABASE_FAULT_KINDS, drawDatabaseSchedule } from './database-schedule';

describe('database fault schedules', () => {
  const seeds = Array.from({ length: 200 }, (_, i) => i + 1);

  it('draws the same schedule from the same seed, and another from another', () => {
    expect(drawDatabaseSchedule(7)).toEqual(drawDatabaseSchedule(7));
    expect(drawDatabaseSchedule(7)).not.toEqual(drawDatabaseSchedule(8));
  });

  it('publishes every event once, in order, each call of one way', () => {
    const wrong: number[] = [];
    for (const seed of seeds) {
      const s = drawDatabaseSchedule(seed);
      const published = s.steps.flatMap((step) => (step.kind === 'publish' ? step.events : []));
      const inOrder = published.length === s.events.length && published.every((n, i) => n === i);
      const oneWay = s.steps.every((step) => step.kind !== 'publish' || step.events.every((n) => s.events[n].via === step.via));
      if (!inOrder || !oneWay) wrong.push(seed);
    }
    expect(wrong).toEqual([]);
  });

  it('keeps within its bounds: 2-5 faults, at most 2 restarts, kills only of existing slots', () => {
    const seen = new Set<string>();
    for (const seed of seeds) {
      const s = drawDatabaseSchedule(seed);
      const faults = s.steps.filter((step) => step.kind !== 'publish' && step.kind !== 'pause');
      expect(faults.length).toBeGreaterThanOrEqual(2);
      expect(faults.length).toBeLessThanOrEqual(5);
      expect(faults.filter((f) => f.kind === 'restart-postgres').length).toBeLessThanOrEqual(2);
      for (const f of faults) {
        seen.add(f.kind === 'restart-postgres' ? `${f.kind} ${f.mode}` : f.kind);
        if (f.kind === 'kill-worker') expect(f.slot).toBeLessThan(s.workers);
      }
    }
    // Every kind, and both restart modes, come up over the seeds.
    expect([...seen].sort()).toEqual(
      [...DATABASE_FAULT_KINDS.filter((k) => k !== 'restart-postgres'), 'restart-postgres fast', 'restart-postgres immediate'].sort(),
    );
  });
});
