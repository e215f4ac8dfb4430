import { NonRetryableError } from '../../errors/non-retryable.error';
import type { ResolvedConsumerOptions } from '../consumer.options';
import { isInstanceOf } from '../../util/describe-error';
import { retryDelayMs } from '../../util/backoff';

/** What to do after a failed attempt: wait and try again, or give the message up (and why). */
export type RetryVerdict = { retryInMs: number } | { giveUp: 'non-retryable' | 'retries-exhausted' };

export type RetryLimits = Pick<ResolvedConsumerOptions, 'maxRetries' | 'maxRetryAgeMs' | 'retryBackoffMs' | 'retryBackoffMaxMs'>;

/**
 * The retry budget of a failing message: `maxRetries` retries, and, with
 * `maxRetryAgeMs`, no retry once it has been failing that long (whichever
 * limit comes first). The wait before a retry is the capped exponential
 * backoff, shortened so that the last retry happens at the age limit rather
 * than past it. `attempt` is the attempt that just failed (1 for the first),
 * `firstFailedAt` and `now` are epoch milliseconds.
 */
export function retryVerdict(
  limits: RetryLimits,
  attempt: number,
  error: unknown,
  firstFailedAt: number,
  now: number,
  random = Math.random,
): RetryVerdict {
  if (isInstanceOf(error, NonRetryableError)) return { giveUp: 'non-retryable' };
  if (attempt > limits.maxRetries) return { giveUp: 'retries-exhausted' };
  const delay = retryDelayMs(attempt, limits.retryBackoffMs, limits.retryBackoffMaxMs, random);
  if (limits.maxRetryAgeMs <= 0) return { retryInMs: delay };
  const left = firstFailedAt + limits.maxRetryAgeMs - now;
  if (left <= 0) return { giveUp: 'retries-exhausted' };
  return { retryInMs: Math.min(delay, left) };
}
