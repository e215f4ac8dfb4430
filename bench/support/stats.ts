export interface Summary {
  median: number;
  min: number;
  max: number;
  /** The 5th percentile of the median over bootstrap resamples of the rounds: a median this low is still plausible. */
  low: number;
  /** The 95th percentile of the same: a median this high is still plausible. */
  high: number;
}

export function summarize(values: readonly number[]): Summary {
  const sorted = [...values].sort((a, b) => a - b);
  const [low, high] = bootstrapMedian(values);
  return { median: median(sorted), min: sorted[0], max: sorted[sorted.length - 1], low, high };
}

/** Median of already sorted values (mean of the middle two for an even count). */
function median(sorted: readonly number[]): number {
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * 5th and 95th percentiles of the median of 2000 resamples (with replacement) of `values`. The
 * generator is seeded, so one set of rounds always gives the same bounds.
 */
export function bootstrapMedian(values: readonly number[], resamples = 2000): [number, number] {
  if (values.length === 0) return [NaN, NaN];
  let seed = 0x9e3779b9;
  const next = (): number => {
    // xorshift32
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 0x1_0000_0000;
  };
  const medians = new Float64Array(resamples);
  const sample = new Float64Array(values.length);
  for (let r = 0; r < resamples; r++) {
    for (let i = 0; i < values.length; i++) sample[i] = values[Math.floor(next() * values.length)];
    sample.sort();
    medians[r] = median(Array.from(sample));
  }
  medians.sort();
  return [medians[Math.floor(0.05 * resamples)], medians[Math.floor(0.95 * resamples)]];
}

/** Nearest-rank percentile (`p` in 0..100) of unsorted samples. */
export function percentile(samples: readonly number[], p: number): number {
  const sorted = Float64Array.from(samples).sort();
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1];
}

/** Events per second for `count` events in `ms` milliseconds. */
export function perSecond(count: number, ms: number): number {
  return (count * 1000) / ms;
}
