import type { IncomingHttpHeaders } from 'node:http';
import { InvalidCloudEventError } from './errors/invalid-cloud-event.error';

/** How a CloudEvent arrived over HTTP (CloudEvents HTTP protocol binding 1.0). */
export type HttpMode = 'binary' | 'structured' | 'batch';

/** The request's body, as the bytes that were sent (UTF-8 text). */
export type HttpBody = Buffer;

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
 * `data` (parsed, once, when it is JSON; else the text as sent).
 */
export function eventsFromHttp(mode: HttpMode, headers: IncomingHttpHeaders, body: HttpBody): unknown[] {
  const text = body.toString('utf8');
  if (mode === 'structured') return [parsed(text)];
  if (mode === 'batch') {
    const events = parsed(text);
    if (!Array.isArray(events)) throw new InvalidCloudEventError('(batch)', 'must be a JSON array of events');
    return events;
  }
  // No prototype: a `ce-__proto__` header becomes an attribute named `__proto__`, which fromCloudEvent refuses by name.
  const event: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  for (const [name, value] of Object.entries(headers)) {
    if (!name.startsWith(CE_PREFIX) || value === undefined) continue;
    event[name.slice(CE_PREFIX.length)] = percentDecoded(Array.isArray(value) ? value.join(',') : value, name);
  }
  const type = headers['content-type'];
  if (type !== undefined) event.datacontenttype = type;
  if (text !== '') event.data = isJson(type) ? parsed(text) : text;
  return [event];
}

function parsed(text: string): unknown {
  if (text === '') throw new InvalidCloudEventError('(body)', 'is empty');
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new InvalidCloudEventError('(body)', 'is not valid JSON');
  }
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
