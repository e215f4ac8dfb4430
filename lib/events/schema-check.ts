import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { EventValidationIssue } from '../errors/event-validation.error';
import { describeThrown } from '../util/describe-error';

/** What a schema made of some data: its output, or the issues (paths already spelled out). */
export type SchemaOutcome = { value: unknown; issues?: undefined } | { issues: EventValidationIssue[] };

/**
 * Runs `schema` on `data`. Synchronous when the schema is (zod's usual
 * schemas are), a promise when its `validate` returns one. A schema that
 * throws counts as a failed check, never as a crash: on the consumer side the
 * data may have been written by anyone.
 */
export function checkAgainstSchema(schema: StandardSchemaV1, data: unknown): SchemaOutcome | Promise<SchemaOutcome> {
  try {
    const result = schema['~standard'].validate(data);
    if (isThenable(result)) return Promise.resolve(result).then(toOutcome, threw);
    return toOutcome(result);
  } catch (error) {
    return threw(error);
  }
}

function isThenable<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as PromiseLike<T> | null)?.then === 'function';
}

/** The result as an outcome; a result that cannot be read (not an object, odd issues) counts as a schema that threw. */
function toOutcome(result: StandardSchemaV1.Result<unknown>): SchemaOutcome {
  try {
    if (!result.issues) return { value: result.value };
    const issues = Array.from(result.issues, (issue) => ({ path: formatPath(issue.path), message: String(issue.message) }));
    // A failure with an empty issue list is still a failure; say so rather than list nothing.
    return { issues: issues.length > 0 ? issues : [{ path: '(root)', message: 'rejected by the schema (no issue given)' }] };
  } catch (error) {
    return threw(error);
  }
}

function threw(error: unknown): SchemaOutcome {
  const { name, message } = describeThrown(error);
  return { issues: [{ path: '(root)', message: `the schema threw ${name}: ${message}` }] };
}

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** `['items', 2, 'sku']` as `items[2].sku`; no path (the data itself) as `(root)`. */
export function formatPath(path: StandardSchemaV1.Issue['path']): string {
  if (!path || path.length === 0) return '(root)';
  let text = '';
  for (const segment of path) {
    const key = typeof segment === 'object' && segment !== null ? segment.key : segment;
    if (typeof key === 'number') text += `[${key}]`;
    else if (typeof key === 'symbol') text += `[${key.toString()}]`;
    else if (IDENTIFIER.test(key)) text += text === '' ? key : `.${key}`;
    else text += `[${JSON.stringify(key)}]`;
  }
  return text;
}
