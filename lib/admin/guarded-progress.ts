import { Logger } from '@nestjs/common';
import { describeError } from '../util/describe-error';
import type { ProgressListener } from './operations.types';

const logger = new Logger('EventrailAdmin');

/**
 * `listener` as a long operation calls it: one that throws is logged once and not called again, and the
 * operation goes on. Its outcome (how many letters were replayed, entries restored, partitions trimmed) is
 * what the caller waits for; a failed progress line (a closed output stream) must not throw that away after
 * the work it counts was done.
 */
export function guardedProgress(listener: ProgressListener | undefined, operation: string): ProgressListener | undefined {
  if (typeof listener !== 'function') return undefined;
  let broken = false;
  return (done, total) => {
    if (broken) return;
    try {
      listener(done, total);
    } catch (error) {
      broken = true;
      logger.warn(
        `${operation}: its onProgress listener threw (${describeError(error)}); it is not called again, and the ${operation} goes on`,
      );
    }
  };
}
