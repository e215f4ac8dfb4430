import { RedisClock } from '../../lib/redis/redis-clock';

/** The base (Redis clock minus the monotonic clock) `clock` uses now. */
const baseOf = (clock: RedisClock): number => clock.now() - Math.round(performance.now());

describe('RedisClock: the offset from TIME replies', () => {
  const TRUE_BASE = 1_000_000;

  it('takes a quick reply at the midpoint of its round trip', () => {
    const clock = new RedisClock();
    clock.observe(TRUE_BASE + 102, 100, 104);
    expect(Math.abs(baseOf(clock) - TRUE_BASE)).toBeLessThanOrEqual(1);
  });

  it('is not skewed by a reply held up for seconds (a stalled Redis) that the offset already fits', () => {
    const clock = new RedisClock();
    clock.observe(TRUE_BASE + 102, 100, 104);
    // Redis read TIME right when the command arrived, then stalled 2.3 s before answering.
    clock.observe(TRUE_BASE + 1_001, 1_000, 3_300);
    expect(Math.abs(baseOf(clock) - TRUE_BASE)).toBeLessThanOrEqual(1);
  });

  it('moves as far as a slow reply proves it wrong, and takes the next quick reply whole', () => {
    const clock = new RedisClock();
    clock.observe(TRUE_BASE + 102, 100, 104);
    // Redis's clock stepped 5 s ahead: a slow reply that cannot fit the old offset moves it to its nearest fit.
    clock.observe(TRUE_BASE + 5_000 + 3_300, 1_000, 3_300);
    expect(Math.abs(baseOf(clock) - (TRUE_BASE + 5_000))).toBeLessThanOrEqual(1);
    clock.observe(TRUE_BASE + 5_000 + 4_002, 4_000, 4_004);
    expect(Math.abs(baseOf(clock) - (TRUE_BASE + 5_000))).toBeLessThanOrEqual(1);
  });

  it('takes replies on a steadily loaded host (each round trip like the last) at their midpoints', () => {
    const clock = new RedisClock();
    clock.observe(TRUE_BASE + 130, 100, 160);
    clock.observe(TRUE_BASE + 1_030 + 7, 1_000, 1_060);
    expect(Math.abs(baseOf(clock) - (TRUE_BASE + 7))).toBeLessThanOrEqual(1);
  });
});
