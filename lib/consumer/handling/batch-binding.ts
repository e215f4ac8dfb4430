import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { EventrailMessage } from '../../events/eventrail-message';
import { reportedFailures } from './batch-result';
import type { HandlerBinding, ResolvedBatchOptions } from './group-plan';

/**
 * The binding of a batch handler. `batch.call` takes the whole batch; `call`
 * runs it on a one-message batch and fails with the error the handler
 * reported for that message, so every path that handles one message at a
 * time (a retry after a split, recovery after a crash) treats it like any
 * other handler.
 */
export function batchBinding(
  name: string,
  method: (messages: EventrailMessage[]) => unknown,
  options: ResolvedBatchOptions,
  schema?: StandardSchemaV1,
): HandlerBinding {
  const callOne = (message: EventrailMessage): unknown => {
    const messages = [message];
    const result = method(messages);
    if (typeof (result as PromiseLike<unknown> | null)?.then !== 'function') return throwReported(name, result, messages);
    return Promise.resolve(result).then((settled) => throwReported(name, settled, messages));
  };
  return { name, call: callOne, schema, batch: { ...options, name, call: method, schema } };
}

function throwReported(name: string, result: unknown, messages: EventrailMessage[]): undefined {
  const failures = reportedFailures(name, result, messages);
  if (failures.size > 0) throw failures.get(0);
  return undefined;
}
