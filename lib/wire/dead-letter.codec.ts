import { DecodeError } from '../errors/decode.error';
import { describeThrown, isInstanceOf } from '../util/describe-error';
import { EventValidationError, type EventValidationIssue } from '../errors/event-validation.error';
import { FIELD, isMalformed, MalformedEntry, RawEntry, readEntry } from './codec';
import { isStreamId } from './stream-id';

/** Longest error stack kept in a dead letter. */
const MAX_STACK = 2_000;
/** Fields of the original entry kept in a dead letter under their own names. */
const ORIGINAL_FIELDS = new Set<string>([FIELD.id, FIELD.event, FIELD.key, FIELD.time, FIELD.data, FIELD.headers]);

/** Why a message was given up and dead-lettered. */
export type GiveUpReason = 'retries-exhausted' | 'non-retryable' | 'malformed' | 'max-deliveries' | 'invalid';

/** What a dead letter records: the entry as read, where it was, and why and when handling it failed. */
export interface DeadLetterRecord {
  group: string;
  partition: number;
  entry: RawEntry | MalformedEntry;
  reason: GiveUpReason;
  error: unknown;
  attempts: number;
  firstFailedAt: Date;
  lastFailedAt: Date;
}

/**
 * A dead letter as returned by `EventrailAdmin.deadLetters`. `id` is the
 * dead letter's own id (pass it to `replayDeadLetters`); `eventId` the event's.
 */
export interface DeadLetter {
  id: string;
  eventId: string | null;
  event: string | null;
  key: string | null;
  /** Parsed payload, or the raw string when it is not valid JSON. */
  data: unknown;
  headers: Record<string, string>;
  group: string;
  partition: number;
  /** Where the event was in its partition. */
  offset: string;
  reason: GiveUpReason;
  error: { name: string; message: string; stack: string | null };
  attempts: number;
  firstFailedAt: Date;
  failedAt: Date;
  worker: string;
  /** Reason `invalid`: where and why the data did not match the event's schema. */
  issues?: EventValidationIssue[];
}

/** Dead-letter stream fields: the original entry's fields under their own names, then the failure. */
export function encodeDeadLetter(failed: DeadLetterRecord, workerId: string): string[] {
  const { entry } = failed;
  const fields: string[] = [];
  if (isMalformed(entry)) {
    fields.push('raw', JSON.stringify(entry.fields));
  } else {
    fields.push(FIELD.id, entry.id, FIELD.event, entry.event, FIELD.time, String(entry.time), FIELD.data, entry.data);
    if (entry.key !== null) fields.push(FIELD.key, entry.key);
    if (entry.headers !== undefined) fields.push(FIELD.headers, entry.headers);
  }
  // Whatever was thrown, described without throwing in turn (a dead letter that cannot be built would stop the partition).
  const error = describeThrown(failed.error);
  fields.push(
    'group',
    failed.group,
    'partition',
    String(failed.partition),
    'offset',
    entry.offset,
    'reason',
    failed.reason,
    'errorName',
    error.name,
    'errorMessage',
    error.message,
    'errorStack',
    (error.stack ?? '').slice(0, MAX_STACK),
    'attempts',
    String(failed.attempts),
    'firstFailedAt',
    String(failed.firstFailedAt.getTime()),
    'lastFailedAt',
    String(failed.lastFailedAt.getTime()),
    'worker',
    workerId,
  );
  // Reason `invalid`: the schema's issues, by path, for the admin API and the dashboard. Only then is the
  // error known to be ours: a handler's thrown value is never inspected beyond describeThrown (a Proxy may throw).
  if (failed.reason === 'invalid' && isInstanceOf(failed.error, EventValidationError)) {
    fields.push('issues', JSON.stringify(failed.error.issues));
  }
  return fields;
}

/**
 * The entry a dead letter was made from, as consumers read it, and the
 * partition it was in: what a replay appends again. A malformed entry comes
 * back with exactly the fields it had. `DecodeError` when the letter has no
 * `offset` (a stream id), its `raw` (a malformed entry's fields, as
 * eventrail writes them) is not a JSON array of field names and values, or
 * it has no `raw` and its entry's fields do not make an entry (none of them,
 * or no `event`, say).
 */
export function originalEntry(list: string[], logTag: string): { entry: RawEntry | MalformedEntry; partition: number } {
  const f = fieldMap(list);
  const partition = Number(f.partition);
  if (typeof f.offset !== 'string' || !isStreamId(f.offset)) throw new DecodeError('its field "offset" is missing or not a stream id');
  if (f.raw !== undefined) {
    return {
      entry: { offset: f.offset, fields: rawFields(f.raw), reason: 'dead-lettered as malformed', to: undefined },
      partition,
    };
  }
  const original: string[] = [];
  for (let i = 0; i + 1 < list.length; i += 2) if (ORIGINAL_FIELDS.has(list[i])) original.push(list[i], list[i + 1]);
  // eventrail writes a malformed entry's letter with `raw`: one without it whose fields are no entry's was
  // edited by hand, and appended as it is it would only be dead-lettered again, as malformed.
  const entry = readEntry(f.offset, original, { partition, logTag });
  if (isMalformed(entry)) throw new DecodeError(`it has no field "raw" and its entry's fields are not an entry's (${entry.reason})`);
  return { entry, partition };
}

/** A malformed entry's fields as its dead letter keeps them (`raw`), or `DecodeError`. */
function rawFields(raw: string): string[] {
  let fields: unknown;
  try {
    fields = JSON.parse(raw);
  } catch {
    throw new DecodeError('its field "raw" is not valid JSON');
  }
  // A stream entry has at least one field and a value for each: anything else could only be appended as another entry.
  if (!Array.isArray(fields) || fields.length === 0 || fields.length % 2 !== 0 || !fields.every((field) => typeof field === 'string'))
    throw new DecodeError('its field "raw" is not a JSON array of field names and values (strings, at least two, an even number)');
  return fields as string[];
}

export function decodeDeadLetter(id: string, list: string[]): DeadLetter {
  const f = fieldMap(list);
  let data: unknown = f.data ?? f.raw ?? null;
  if (typeof data === 'string') {
    try {
      data = JSON.parse(data);
    } catch {
      // kept raw: that may be why it was dead-lettered
    }
  }
  let headers: Record<string, string>;
  try {
    headers = f.headers ? (JSON.parse(f.headers) as Record<string, string>) : {};
  } catch {
    headers = {};
  }
  return {
    id,
    eventId: f.id ?? null,
    event: f.event ?? null,
    key: f.key ?? null,
    data,
    headers,
    group: f.group,
    partition: Number(f.partition),
    offset: f.offset,
    reason: f.reason as GiveUpReason,
    error: { name: f.errorName, message: f.errorMessage, stack: f.errorStack || null },
    attempts: Number(f.attempts),
    firstFailedAt: new Date(Number(f.firstFailedAt)),
    failedAt: new Date(Number(f.lastFailedAt)),
    worker: f.worker,
    ...(f.issues === undefined ? {} : { issues: parseIssues(f.issues) }),
  };
}

function parseIssues(json: string): EventValidationIssue[] {
  try {
    const issues = JSON.parse(json) as unknown;
    return Array.isArray(issues) ? (issues as EventValidationIssue[]) : [];
  } catch {
    return [];
  }
}

function fieldMap(list: string[]): Record<string, string> {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < list.length; i += 2) f[list[i]] = list[i + 1];
  return f;
}
