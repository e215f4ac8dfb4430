import type { IncomingHttpHeaders } from 'node:http';
import { InvalidCloudEventError } from './errors/invalid-cloud-event.error';

/** How a CloudEvent arrived over HTTP (CloudEvents HTTP protocol binding 1.0). */
export type HttpMode = 'binary' | 'structured' | 'batch';

/** The request's body: text as read, or a value a body parser already made of it. */
export type HttpBody = string | object | undefined;

const STRUCTURED = 'application/cloudevents+json';
const BATCH = 'application/cloudevents-batch+json';
/** Binary mode: every `ce-` header but these is an attribute or extension; the content type is `datacontenttype`. */
const CE_PREFIX = 'ce-';

/** Which mode a request uses, or null when it is no CloudEvent (the caller answers 415). */
export function httpMode(headers: IncomingHttpHeaders): HttpMode | null {
  const type = mediaType(headers['content-type']);
  if (type === STRUCTURED) return 'structured';
  if (type === BATCH) return 'batch';
  return headers['ce-specversion'] !== undefined ? 'binary' : null;
}

/**
 * The events of a request in structured form, for `fromCloudEvent`: the
 * parsed body in structured mode, its elements in batch mode, and in binary
 * mode an event built from the `ce-*` headers (attributes and extensions,
 * percent-decoded), `Content-Type` as `datacontenttype` and the body as
 * `data` (parsed when it is JSON, else the text).
 */
export function eventsFromHttp(mode: HttpMode, headers: IncomingHttpHeaders, body: HttpBody): unknown[] {
  if (mode === 'structured') return [parsed(body)];
  if (mode === 'batch') {
    const events = parsed(body);
    if (!Array.isArray(events)) throw new InvalidCloudEventError('(batch)', 'must be a JSON array of events');
    return events;
  }
  const event: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (!name.startsWith(CE_PREFIX) || value === undefined) continue;
    event[name.slice(CE_PREFIX.length)] = percentDecoded(Array.isArray(value) ? value.join(',') : value, name);
  }
  const type = headers['content-type'];
  if (type !== undefined) event.datacontenttype = type;
  if (body !== undefined && body !== '') event.data = isJson(type) ? parsed(body) : textOf(body);
  return [event];
}

function parsed(body: HttpBody): unknown {
  if (body === undefined || body === '') throw new InvalidCloudEventError('(body)', 'is empty');
  if (typeof body !== 'string') return body;
  try {
    return JSON.parse(body) as unknown;
  } catch {
    throw new InvalidCloudEventError('(body)', 'is not valid JSON');
  }
}

function textOf(body: HttpBody): string {
  if (typeof body === 'string') return body;
  // A body parser made an object of a type we read as text (urlencoded): its JSON is the closest text.
  return JSON.stringify(body);
}

function isJson(type: string | undefined): boolean {
  const media = mediaType(type);
  return media === undefined || media === 'application/json' || media === 'text/json' || media.endsWith('+json');
}

function mediaType(type: string | undefined): string | undefined {
  return type?.split(';')[0].trim().toLowerCase();
}

/** Binary-mode header values are percent-encoded where they are not printable ASCII (the HTTP binding, 3.1.3.2). */
function percentDecoded(value: string, header: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw new InvalidCloudEventError(header, 'is not validly percent-encoded');
  }
}
