import { Logger } from '@nestjs/common';
import { InvalidOptionError } from '../errors/invalid-option.error';
import { escapeControls } from '../util/control-chars';
import { describeError } from '../util/describe-error';
import type { ProgressListener } from './operations.types';

const logger = new Logger('EventrailAdmin');

/**
 * `listener` as a long operation calls it: one that throws (or, async, rejects) is logged once and not
 * called again once that is seen, and the operation goes on. Its outcome (how many letters were replayed,
 * entries restored, partitions trimmed) is what the caller waits for; a failed progress line (a closed
 * output stream) must not throw that away after the work it counts was done, nor leave an unhandled
 * rejection behind. `InvalidOptionError` for an `onProgress` that is not a function.
 */
export function guardedProgress(listener: ProgressListener | undefined, operation: string): ProgressListener | undefined {
  if (listener === undefined || listener === null) return undefined;
  if (typeof listener !== 'function') throw new InvalidOptionError('onProgress', listener, 'a function (done, total) => void');
  let broken = false;
  const failed = (error: unknown): void => {
    if (broken) return;
    broken = true;
    try {
      logger.warn(
        `${operation}: its onProgress listener threw (${escapeControls(describeError(error))}); it is not called again, and the ${operation} goes on`,
      );
    } catch {
      // A logger that throws must not undo what the guard is for.
    }
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
