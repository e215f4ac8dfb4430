/**
 * Delay before retry number `retry` (1 for the first): exponential from
 * `baseMs`, capped at `maxMs`, with "equal jitter" (half fixed, half random)
 * so a burst of failures does not retry in lockstep.
 */
export function retryDelayMs(retry: number, baseMs: number, maxMs: number, random = Math.random): number {
  const exponential = Math.min(maxMs, baseMs * 2 ** Math.min(retry - 1, 30));
  return Math.round(exponential / 2 + random() * (exponential / 2));
}
