import { Logger } from '@nestjs/common';
import { describeError } from '../util/describe-error';
import type { ProgressListener } from './operations.types';

const logger = new Logger('EventrailAdmin');

/**
 * `listener` as a long operation calls it: one that throws (or, async, rejects) is logged once and not
 * called again, and the operation goes on. Its outcome (how many letters were replayed, entries restored,
 * partitions trimmed) is what the caller waits for; a failed progress line (a closed output stream) must not
 * throw that away after the work it counts was done, nor leave an unhandled rejection behind.
 */
export function guardedProgress(listener: ProgressListener | undefined, operation: string): ProgressListener | undefined {
  if (typeof listener !== 'function') return undefined;
  let broken = false;
  const failed = (error: unknown): void => {
    if (broken) return;
    broken = true;
    logger.warn(
      `${operation}: its onProgress listener threw (${describeError(error)}); it is not called again, and the ${operation} goes on`,
    );
  };
  return (done, total) => {
    if (broken) return;
    try {
      const result = listener(done, total) as unknown;
      if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function')
        (result as PromiseLike<unknown>).then(undefined, failed);
    } catch (error) {
      failed(error);
    }
  };
}
