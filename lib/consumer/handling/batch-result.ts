import type { EventrailMessage } from '../../events/eventrail-message';
import { InvalidBatchResultError } from '../../errors/invalid-batch-result.error';

/**
 * What a batch handler may return: the messages of the batch it could not
 * handle, each with its error. Only those go down the retry path (one by one,
 * in log order); the others count as handled. Returning nothing (or
 * `{ failed: [] }`) means the whole batch was handled.
 */
export interface BatchResult<T = unknown> {
  failed: Array<{ message: EventrailMessage<T>; error: unknown }>;
}

/**
 * The failures a batch handler reported, as indexes into `messages` with
 * their errors, in log order. Throws `InvalidBatchResultError` for a result
 * that is not a `BatchResult` of this batch. A message is recognised by
 * identity, or by its offset (a handler may have copied it).
 */
export function reportedFailures(handler: string, result: unknown, messages: readonly EventrailMessage[]): Map<number, unknown> {
  const failures = new Map<number, unknown>();
  if (result === undefined || result === null) return failures;
  const failed = (result as Partial<BatchResult>).failed;
  if (typeof result !== 'object' || !Array.isArray(failed)) {
    throw new InvalidBatchResultError(handler, 'expected undefined or { failed: [{ message, error }] }');
  }
  if (failed.length === 0) return failures;
  const byOffset = new Map(messages.map((message, index) => [message.offset, index]));
  for (const item of failed as unknown[]) {
    const index = indexOf((item as { message?: unknown } | null)?.message, messages, byOffset);
    if (index === undefined) throw new InvalidBatchResultError(handler, 'a failed item names a message that is not in the batch');
    failures.set(index, (item as { error?: unknown }).error ?? new Error('reported as failed by the batch handler, without an error'));
  }
  return new Map([...failures].sort(([a], [b]) => a - b));
}

function indexOf(message: unknown, messages: readonly EventrailMessage[], byOffset: Map<string, number>): number | undefined {
  if (typeof message !== 'object' || message === null) return undefined;
  const index = messages.indexOf(message as EventrailMessage);
  return index >= 0 ? index : byOffset.get((message as { offset?: unknown }).offset as string);
}
