import { isUtf8 } from 'node:buffer';
import type { IncomingHttpHeaders } from 'node:http';
import { InvalidCloudEventError } from './errors/invalid-cloud-event.error';
import { InvalidUtf8BodyError } from './errors/invalid-utf8-body.error';
import { UnsupportedCloudEventsBodyError } from './errors/unsupported-cloud-events-body.error';

/** How a CloudEvent arrived over HTTP (CloudEvents HTTP protocol binding 1.0). */
export type HttpMode = 'binary' | 'structured' | 'batch';

/** The request's body, as the bytes that were sent (refused unless UTF-8 text). */
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

/** Refuses a compressed body (`UnsupportedCloudEventsBodyError`): the ingress stores bytes as sent and decodes none. */
export function checkContentEncoding(headers: IncomingHttpHeaders): void {
  const encoding = headers['content-encoding']?.trim().toLowerCase();
  if (encoding !== undefined && encoding !== '' && encoding !== 'identity')
    throw new UnsupportedCloudEventsBodyError('content-encoding', encoding);
}

/**
 * Refuses a `ce-*` header sent more than once (Node would join the values with ", " into one attribute),
 * from the request's raw header list.
 */
export function checkRepeatedAttributeHeaders(rawHeaders: readonly string[]): void {
  const seen = new Set<string>();
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i].toLowerCase();
    if (!name.startsWith(CE_PREFIX)) continue;
    if (seen.has(name)) throw new InvalidCloudEventError(name, 'is sent more than once: a CloudEvent attribute has one value');
    seen.add(name);
  }
}

/**
 * The body as text: UTF-8 (or US-ASCII, a subset) only, since data is stored as JSON text; another charset
 * is refused (415), and bytes that are not valid UTF-8 (400, naming the first one's offset).
 */
function bodyText(headers: IncomingHttpHeaders, body: HttpBody): string {
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(headers['content-type'] ?? '')?.[1].toLowerCase();
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8' && charset !== 'us-ascii')
    throw new UnsupportedCloudEventsBodyError('content-type', charset);
  if (!isUtf8(body)) throw new InvalidUtf8BodyError(firstInvalidUtf8(body));
  return body.toString('utf8');
}

/** The offset of the first byte that does not start or continue a valid UTF-8 sequence. */
function firstInvalidUtf8(bytes: Buffer): number {
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i];
    const length = b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    if (length === 0) return i;
    if (length > 1 && !isUtf8(bytes.subarray(i, i + length))) return i;
    i += length;
  }
  return bytes.length;
}

/**
 * The events of a request in structured form, for `fromCloudEvent`: the
 * parsed body in structured mode, its elements in batch mode, and in binary
 * mode an event built from the `ce-*` headers (attributes and extensions,
 * percent-decoded), `Content-Type` as `datacontenttype` and the body as
 * `data` (parsed, once, when it is JSON; else the text as sent).
 */
export function eventsFromHttp(mode: HttpMode, headers: IncomingHttpHeaders, body: HttpBody): unknown[] {
  const text = bodyText(headers, body);
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
