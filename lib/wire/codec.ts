import { DecodeError } from '../errors/decode.error';
import { derivedEventId } from './event-id';

/**
 * The wire format: one stream entry is a flat list of fields. Only `event` and
 * `data` are required, so a producer in any language can append an event with
 * one XADD. What the stream id already says is not written again: eventrail's
 * own `publish` writes `id` and `time` only for an event that carries an
 * identity of its own (an explicit id, a dead-letter replay, an archive
 * restore); otherwise readers derive both from the entry's stream id.
 *
 * | field     | content                                                      |
 * |-----------|--------------------------------------------------------------|
 * | `id`      | event id (default: `derivedEventId` of the entry's position) |
 * | `event`   | event type, e.g. `payment.completed`                         |
 * | `key`     | ordering key (absent for keyless events)                     |
 * | `time`    | publish time, Unix ms (default: the stream id's)             |
 * | `data`    | JSON of the payload                                          |
 * | `headers` | JSON object of string values (optional)                      |
 * | `to`      | only this group handles it (dead-letter replays)             |
 */
export const FIELD = {
  id: 'id',
  event: 'event',
  key: 'key',
  time: 'time',
  data: 'data',
  headers: 'headers',
  to: 'to',
} as const;

export interface EncodedEvent {
  /** Written only when the event has an identity the stream id does not give (with `time`). */
  id?: string;
  event: string;
  key: string | undefined;
  /** Publish time, Unix ms; written only with `id`. */
  time?: number;
  data: string;
  headers: string | undefined;
  to?: string;
}

/** Where an entry was read from: with its stream id, what its derived event id is made of. */
export interface EntryOrigin {
  readonly partition: number;
  /** `EventrailKeys.logTag` of the log. */
  readonly logTag: string;
}

/** XADD arguments after the id, in a fixed order. */
export function encodeFields(e: EncodedEvent): string[] {
  // What `publish` writes for an event without an id of its own, as one literal: an array grown by pushes
  // reserves room for about 20 values.
  if (e.id === undefined && e.headers === undefined && e.to === undefined) {
    return e.key === undefined ? [FIELD.event, e.event, FIELD.data, e.data] : [FIELD.event, e.event, FIELD.key, e.key, FIELD.data, e.data];
  }
  const fields = e.id === undefined ? [FIELD.event, e.event] : [FIELD.id, e.id, FIELD.event, e.event];
  if (e.key !== undefined) fields.push(FIELD.key, e.key);
  if (e.id !== undefined && e.time !== undefined) fields.push(FIELD.time, String(e.time));
  fields.push(FIELD.data, e.data);
  if (e.headers !== undefined) fields.push(FIELD.headers, e.headers);
  if (e.to !== undefined) fields.push(FIELD.to, e.to);
  return fields;
}

/**
 * The fields that re-deliver `entry` to `group` alone, replacing any `to` it
 * had. A well-formed entry is written by `encodeFields` with its event id and
 * publish time spelled out, since its new stream id says neither; a malformed
 * one goes back exactly as it came (and is dead-lettered again unless fixed
 * at the source).
 */
export function redeliveryFields(entry: RawEntry | MalformedEntry, group: string): string[] {
  if (isMalformed(entry)) {
    const fields: string[] = [];
    for (let i = 0; i + 1 < entry.fields.length; i += 2)
      if (entry.fields[i] !== FIELD.to) fields.push(entry.fields[i], entry.fields[i + 1]);
    fields.push(FIELD.to, group);
    return fields;
  }
  const { id, event, key, time, data, headers } = entry;
  return encodeFields({ id, event, key: key ?? undefined, time, data, headers, to: group });
}

/** An entry as read from the stream, with its payload still undecoded. */
export interface RawEntry {
  offset: string;
  /** The entry's `id` field, or the id derived from its position when it has none. */
  id: string;
  event: string;
  key: string | null;
  /** The entry's `time` field, or its stream id's milliseconds. */
  time: number;
  data: string;
  headers: string | undefined;
  /** Set on dead-letter replays: the one group that handles the entry. */
  to: string | undefined;
}

export interface MalformedEntry {
  offset: string;
  fields: string[];
  reason: string;
  /**
   * The `to` field when it could be read: a replayed malformed entry is still
   * for its one group, or every other group would dead-letter it again.
   */
  to: string | undefined;
}

/**
 * Reads the fields of one entry of `origin`'s partition. Cheap: the payload is
 * parsed later, and only for events the group handles. An entry without `id`
 * gets its derived event id, one without `time` its stream id's milliseconds.
 */
export function readEntry(offset: string, fields: string[], origin: EntryOrigin): RawEntry | MalformedEntry {
  let id: string | undefined;
  let event: string | undefined;
  let key: string | null = null;
  let time: string | undefined;
  let data: string | undefined;
  let headers: string | undefined;
  let to: string | undefined;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const value = fields[i + 1];
    switch (fields[i]) {
      case FIELD.id:
        id = value;
        break;
      case FIELD.event:
        event = value;
        break;
      case FIELD.key:
        key = value;
        break;
      case FIELD.time:
        time = value;
        break;
      case FIELD.data:
        data = value;
        break;
      case FIELD.headers:
        headers = value;
        break;
      case FIELD.to:
        to = value;
        break;
    }
  }
  const entry = entryOrReason(offset, id, event, key, time, data, headers, to, origin);
  return typeof entry === 'string' ? { offset, fields, reason: entry, to } : entry;
}

/**
 * What the field values of an entry make: the entry, or why it is malformed.
 * The one place that says what a readable entry is, for `readEntry` and the
 * consumer's buffer reader (`entry-reader.ts`) alike.
 */
export function entryOrReason(
  offset: string,
  id: string | undefined,
  event: string | undefined,
  key: string | null,
  time: string | undefined,
  data: string | undefined,
  headers: string | undefined,
  to: string | undefined,
  origin: EntryOrigin,
): RawEntry | string {
  if (!event) return 'missing field "event"';
  if (data === undefined) return 'missing field "data"';
  let publishedAt: number;
  if (time === undefined) {
    publishedAt = Number(offset.slice(0, offset.indexOf('-')));
  } else {
    publishedAt = Number(time);
    if (!Number.isFinite(publishedAt)) return 'field "time" is not a number of milliseconds';
  }
  return { offset, id: id || derivedEventId(origin.logTag, origin.partition, offset), event, key, time: publishedAt, data, headers, to };
}

export function isMalformed(entry: RawEntry | MalformedEntry): entry is MalformedEntry {
  return (entry as MalformedEntry).reason !== undefined;
}

/** Parses payload and headers; throws `DecodeError` with the reason when they are not valid. */
export function decodePayload(entry: RawEntry): { data: unknown; headers: Record<string, string> } {
  let data: unknown;
  try {
    data = JSON.parse(entry.data);
  } catch {
    throw new DecodeError('field "data" is not valid JSON');
  }
  if (entry.headers === undefined) return { data, headers: {} };
  let headers: unknown;
  try {
    headers = JSON.parse(entry.headers);
  } catch {
    throw new DecodeError('field "headers" is not valid JSON');
  }
  if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) {
    throw new DecodeError('field "headers" is not a JSON object');
  }
  for (const value of Object.values(headers)) {
    if (typeof value !== 'string') throw new DecodeError('field "headers" has a value that is not a string');
  }
  return { data, headers: headers as Record<string, string> };
}
