/**
 * Moves this process's clock by `SKEWED_CLOCK_MS` (both `Date.now()` and
 * `new Date()`), as on a host whose clock is off. Imported first by a child
 * process, before anything reads the time.
 */
const skew = Number(process.env.SKEWED_CLOCK_MS ?? 0);
if (skew !== 0) {
  const RealDate = Date;
  class SkewedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(RealDate.now() + skew);
      else super(...(args as [string | number | Date]));
    }

    static override now(): number {
      return RealDate.now() + skew;
    }
  }
  globalThis.Date = SkewedDate as DateConstructor;
}
