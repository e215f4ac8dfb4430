import { createHash } from 'node:crypto';
import type { EventrailMessage } from '../events/eventrail-message';
import { EventrailError } from '../errors/eventrail.error';
import { InvalidCloudEventError } from './errors/invalid-cloud-event.error';
import { validateEventName } from '../events/validate-event';

/**
 * A CloudEvent 1.0 in structured JSON mode (`application/cloudevents+json`):
 * the context attributes, extensions (lowercase letters and digits, string
 * values here) and `data`.
 */
export interface EventrailCloudEvent {
  specversion: '1.0';
  id: string;
  source: string;
  type: string;
  subject?: string;
  time?: string;
  datacontenttype?: string;
  dataschema?: string;
  data?: unknown;
  [extension: string]: unknown;
}

/** What `fromCloudEvent` makes of a CloudEvent: the arguments of `publish`, ready for `publishMany`. */
export interface CloudEventPublishInput {
  event: string;
  data: unknown;
  /**
   * The eventrail event id: derived from the CloudEvent's `source` and `id` (`cloudEventId`), which together
   * are what makes a CloudEvent unique; the CloudEvent's own `id` is kept in the header `ce-id`. So, with
   * producer dedup, a redelivered event appends once, and two sources may use the same ids.
   */
  id: string;
  /** The event's `subject`, as the ordering key. */
  key?: string;
  headers?: Record<string, string>;
}

/** Headers that carry CloudEvents attributes eventrail has no field for; `toCloudEvent` turns them back into the attributes. */
export const CLOUD_EVENT_HEADERS = {
  id: 'ce-id',
  source: 'ce-source',
  time: 'ce-time',
  datacontenttype: 'ce-datacontenttype',
  dataschema: 'ce-dataschema',
} as const;

/** The extension that carries, as JSON, the headers whose names are not valid extension names. */
export const HEADERS_EXTENSION = 'eventrailheaders';

const CONTEXT_ATTRIBUTES = new Set([
  'specversion',
  'id',
  'source',
  'type',
  'subject',
  'time',
  'datacontenttype',
  'dataschema',
  'data',
  'data_base64',
]);
/** The name-based UUID namespace of `cloudEventId` (RFC 9562's URL namespace). */
const URL_NAMESPACE = Buffer.from('6ba7b8119dad11d180b400c04fd430c8', 'hex');
/** CloudEvents 1.0: extension names are lowercase ASCII letters and digits. */
const EXTENSION_NAME = /^[a-z0-9]+$/;
/** RFC 3339, as CloudEvents' `time` is. */
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/i;

/**
 * The CloudEvent (structured JSON mode) of a handled message: `id`, `type`
 * (the event name), `source` (`options.source`, unless the event came in as
 * a CloudEvent and kept its own), `subject` (the key), `time` (publish time,
 * or the original `time`), `datacontenttype`, and the headers as extensions.
 * A header whose name is not a valid extension name (lowercase letters and
 * digits, not an attribute's) travels in the `eventrailheaders` extension,
 * a JSON object of all such headers.
 */
export function toCloudEvent(message: EventrailMessage, options: { source: string }): EventrailCloudEvent {
  if (typeof options?.source !== 'string' || options.source.length === 0) {
    throw new InvalidCloudEventError('source', 'must be a non-empty URI-reference (pass { source } or set cloudEvents.source)');
  }
  const headers = { ...message.headers };
  const kept = (name: string): string | undefined => {
    const value = headers[name];
    delete headers[name];
    return value;
  };
  const event: EventrailCloudEvent = {
    specversion: '1.0',
    id: kept(CLOUD_EVENT_HEADERS.id) ?? message.id,
    source: kept(CLOUD_EVENT_HEADERS.source) ?? options.source,
    type: message.event,
    time: kept(CLOUD_EVENT_HEADERS.time) ?? message.publishedAt.toISOString(),
    datacontenttype: kept(CLOUD_EVENT_HEADERS.datacontenttype) ?? 'application/json',
  };
  const dataschema = kept(CLOUD_EVENT_HEADERS.dataschema);
  if (dataschema !== undefined) event.dataschema = dataschema;
  if (message.key !== null) event.subject = message.key;
  const other: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (EXTENSION_NAME.test(name) && !CONTEXT_ATTRIBUTES.has(name) && name !== HEADERS_EXTENSION) event[name] = value;
    else other[name] = value;
  }
  if (Object.keys(other).length > 0) event[HEADERS_EXTENSION] = JSON.stringify(other);
  event.data = message.data;
  return event;
}

/**
 * The `publish` arguments of a CloudEvent in structured JSON mode (an object,
 * or its JSON text), validated: `specversion` 1.0, a non-empty `id`, `source`
 * and `type` (a valid event name), an RFC 3339 `time`. `subject` becomes the
 * key; `source`, `time`, `datacontenttype` and `dataschema` are kept in
 * `ce-*` headers; extensions become headers (non-string values as text, the
 * `eventrailheaders` extension unpacked). `data` must be JSON (or text with a
 * non-JSON `datacontenttype`); binary `data_base64` is refused.
 */
export function fromCloudEvent(input: unknown): CloudEventPublishInput {
  const event = typeof input === 'string' ? parseJson(input) : input;
  if (typeof event !== 'object' || event === null || Array.isArray(event)) {
    throw new InvalidCloudEventError('(event)', 'must be a JSON object in structured mode');
  }
  const e = event as Record<string, unknown>;
  if (e.specversion !== '1.0') throw new InvalidCloudEventError('specversion', `must be "1.0", got ${show(e.specversion)}`);
  const id = requiredString(e, 'id');
  const source = requiredString(e, 'source');
  const type = requiredString(e, 'type');
  try {
    validateEventName(type);
  } catch (error) {
    if (error instanceof EventrailError) throw new InvalidCloudEventError('type', `is not a valid event name: ${error.message}`);
    throw error;
  }
  const headers: Record<string, string> = {};
  const attributeHeaders: Record<string, string> = { [CLOUD_EVENT_HEADERS.id]: id, [CLOUD_EVENT_HEADERS.source]: source };
  const time = optionalString(e, 'time');
  if (time !== undefined) {
    if (!RFC3339.test(time) || Number.isNaN(Date.parse(time)))
      throw new InvalidCloudEventError('time', `must be an RFC 3339 timestamp, got ${show(time)}`);
    attributeHeaders[CLOUD_EVENT_HEADERS.time] = time;
  }
  const datacontenttype = optionalString(e, 'datacontenttype');
  if (datacontenttype !== undefined && !isJsonType(datacontenttype))
    attributeHeaders[CLOUD_EVENT_HEADERS.datacontenttype] = datacontenttype;
  const dataschema = optionalString(e, 'dataschema');
  if (dataschema !== undefined) attributeHeaders[CLOUD_EVENT_HEADERS.dataschema] = dataschema;
  const subject = optionalString(e, 'subject');
  if (e.data_base64 !== undefined) {
    throw new InvalidCloudEventError('data_base64', 'is binary data, which eventrail does not store: send JSON (or text) data');
  }
  for (const [name, value] of Object.entries(e)) {
    if (CONTEXT_ATTRIBUTES.has(name) || value === undefined || value === null) continue;
    if (!EXTENSION_NAME.test(name))
      throw new InvalidCloudEventError(name, 'is not a valid extension name (lowercase letters and digits only)');
    if (name === HEADERS_EXTENSION) Object.assign(headers, unpackHeaders(value));
    else if (typeof value === 'object') throw new InvalidCloudEventError(name, 'must be a string, number or boolean (an extension value)');
    else headers[name] = String(value);
  }
  // Set last, so no extension can stand in for them.
  Object.assign(headers, attributeHeaders);
  const data = e.data === undefined ? null : e.data;
  return { event: type, data, id: cloudEventId(source, id), ...(subject === undefined ? {} : { key: subject }), headers };
}

/**
 * `fromCloudEvent` of each event, all validated before any is used; an error names the event's index
 * when there are several.
 */
export function fromCloudEvents(events: readonly unknown[]): CloudEventPublishInput[] {
  return events.map((event, index) => {
    try {
      return fromCloudEvent(event);
    } catch (error) {
      if (events.length > 1 && error instanceof Error) error.message = `event ${index}: ${error.message}`;
      throw error;
    }
  });
}

/**
 * The eventrail event id of a CloudEvent: the name-based UUID (version 5, in the URL namespace) of the
 * JSON text `["<source>","<id>"]`, as `JSON.stringify([source, id])` writes it. The same event always
 * gets the same id; the same `id` from another source gets another.
 */
export function cloudEventId(source: string, id: string): string {
  const hash = createHash('sha1')
    .update(URL_NAMESPACE)
    .update(JSON.stringify([source, id]), 'utf8')
    .digest();
  hash[6] = (hash[6] & 0x0f) | 0x50;
  hash[8] = (hash[8] & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** JSON media types (`application/json`, `text/json`, `application/*+json`), whose data is the JSON value itself. */
function isJsonType(type: string): boolean {
  const media = type.split(';')[0].trim().toLowerCase();
  return media === 'application/json' || media === 'text/json' || media.endsWith('+json');
}

function unpackHeaders(value: unknown): Record<string, string> {
  const parsed = typeof value === 'string' ? parseJson(value, HEADERS_EXTENSION) : undefined;
  if (
    typeof parsed !== 'object' ||
    parsed === null ||
    Array.isArray(parsed) ||
    !Object.values(parsed).every((v) => typeof v === 'string')
  ) {
    throw new InvalidCloudEventError(HEADERS_EXTENSION, 'must be the JSON text of an object of string values');
  }
  for (const name of Object.keys(parsed)) {
    // Every ce-* name is kept for attributes (ce-type, ce-subject, ... included), whatever its case.
    if (name.toLowerCase().startsWith('ce-'))
      throw new InvalidCloudEventError(HEADERS_EXTENSION, `may not carry ${name}: ce-* headers are set by the attributes only`);
    if (name === '__proto__') throw new InvalidCloudEventError(HEADERS_EXTENSION, 'may not carry a header named __proto__');
  }
  return parsed as Record<string, string>;
}

function requiredString(e: Record<string, unknown>, name: string): string {
  const value = e[name];
  if (typeof value !== 'string' || value.length === 0)
    throw new InvalidCloudEventError(name, `must be a non-empty string, got ${show(value)}`);
  return value;
}

function optionalString(e: Record<string, unknown>, name: string): string | undefined {
  const value = e[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw new InvalidCloudEventError(name, `must be a string, got ${show(value)}`);
  return value;
}

function parseJson(text: string, attribute = '(event)'): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new InvalidCloudEventError(attribute, 'is not valid JSON');
  }
}

function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  const text = typeof value === 'string' ? JSON.stringify(value) : typeof value;
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}
