import { DecodeError } from '../errors/decode.error';
import { decodePayload, EntryOrigin, isMalformed, readEntry } from '../wire/codec';
import type { LogEntry } from './admin.types';

/** A stream entry as the admin service shows it: decoded when it can be, with the reason when it cannot. */
export function toLogEntry(origin: EntryOrigin, offset: string, fields: string[]): LogEntry {
  const raw = readEntry(offset, fields, origin);
  const { partition } = origin;
  if (isMalformed(raw)) {
    return {
      partition,
      offset,
      id: null,
      event: null,
      key: null,
      data: null,
      headers: {},
      publishedAt: null,
      to: raw.to ?? null,
      malformed: raw.reason,
      fields,
    };
  }
  const base = {
    partition,
    offset,
    id: raw.id,
    event: raw.event,
    key: raw.key,
    publishedAt: new Date(raw.time),
    to: raw.to ?? null,
    fields: null,
  };
  try {
    return { ...base, ...decodePayload(raw), malformed: null };
  } catch (error) {
    if (!(error instanceof DecodeError)) throw error;
    return { ...base, data: raw.data, headers: {}, malformed: error.message };
  }
}
