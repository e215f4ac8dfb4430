import { eventOf } from '../events/event-definition';
import type { Link, Span } from '@opentelemetry/api';
import { describeError, isError } from '../util/describe-error';
import { ATTR, eventrailTracer, liveOpenTelemetry, MESSAGING_SYSTEM, openTelemetry } from './open-telemetry';
import type { ResolvedTracingOptions } from './tracing.options';

/** The parts of `publish`'s options and results the spans read (structurally, so tracing does not import the publisher). */
interface Traceable {
  key?: string;
  id?: string;
  headers?: Record<string, string>;
}
interface TraceableEvent extends Traceable {
  event: unknown;
}
interface Appended {
  id: string;
  partition: number;
  offset: string;
}

/** What the publisher needs to know to trace: the log's prefix and the tracing options. */
export interface PublishTracingConfig {
  prefix: string;
  tracing: ResolvedTracingOptions;
}

/**
 * A PRODUCER span around one `publish` or `publishMany` call, and the options
 * or events to publish with, their headers carrying the span's W3C trace
 * context (an event that already has a `traceparent` keeps it, and the span
 * links to it).
 */
export interface PublishSpan<T> {
  input: T;
  /** Ends the span when the append settles, with the results or the error. */
  track<R extends Appended | Appended[]>(results: Promise<R>): Promise<R>;
}

/** Undefined when tracing is off or OpenTelemetry is not installed: then publish as if it did not exist. */
export function startPublishSpan<O extends Traceable>(config: PublishTracingConfig, event: string, options: O): PublishSpan<O> | undefined {
  const api = liveOpenTelemetry(config.tracing.enabled);
  const read = api && typeof event === 'string' ? readTraceable(options) : undefined;
  if (!api || !read) return undefined;
  const links: Link[] = [];
  const own = linkTo(read.headers, links);
  const { key, id } = read.copy;
  const span = eventrailTracer(api).startSpan(`publish ${event}`, {
    kind: api.SpanKind.PRODUCER,
    attributes: {
      ...producerAttributes(config, event),
      ...(typeof key === 'string' ? { [ATTR.key]: key } : {}),
      ...(typeof id === 'string' ? { [ATTR.messageId]: id } : {}),
    },
    links,
  });
  const headers = own ? read.headers : withTraceContext(span, read.headers);
  return publishSpan(span, { ...read.copy, headers });
}

/** One span for the whole `publishMany` call; each event without a trace context of its own gets the span's. */
export function startPublishManySpan<E extends TraceableEvent>(
  config: PublishTracingConfig,
  events: ReadonlyArray<E>,
): PublishSpan<ReadonlyArray<E>> | undefined {
  const api = liveOpenTelemetry(config.tracing.enabled);
  if (!api || !Array.isArray(events) || events.length === 0) return undefined;
  const reads: Array<{ copy: E; headers: Record<string, string> | undefined }> = [];
  for (const input of events) {
    const read = readTraceable(input);
    // A `defineEvent` definition stands for its name.
    if (!read || typeof eventOf(read.copy.event).name !== 'string') return undefined;
    reads.push(read);
  }
  const names = new Set(reads.map((r) => eventOf(r.copy.event).name as string));
  const name = names.size === 1 ? [...names][0] : 'batch';
  const links: Link[] = [];
  const owned = reads.map((r) => linkTo(r.headers, links));
  const span = eventrailTracer(api).startSpan(`publish ${name}`, {
    kind: api.SpanKind.PRODUCER,
    attributes: { ...producerAttributes(config, name), [ATTR.batchCount]: events.length },
    links,
  });
  const traced = reads.map((r, i) => ({ ...r.copy, headers: owned[i] ? r.headers : withTraceContext(span, r.headers) }));
  return publishSpan(span, traced);
}

/**
 * A plain copy of the options and of their headers, read once, or undefined
 * when they are not plain objects or reading them throws (a getter, a
 * Proxy): such input is the publisher's to refuse with its typed errors, and
 * it then goes untraced.
 */
function readTraceable<O extends Traceable>(options: O): { copy: O; headers: Record<string, string> | undefined } | undefined {
  if (typeof options !== 'object' || options === null) return undefined;
  try {
    const copy = { ...options };
    const given: unknown = copy.headers;
    if (given === undefined) return { copy, headers: undefined };
    if (typeof given !== 'object' || given === null || Array.isArray(given)) return undefined;
    return { copy, headers: { ...(given as Record<string, string>) } };
  } catch {
    return undefined;
  }
}

function publishSpan<T>(span: Span, input: T): PublishSpan<T> {
  const api = openTelemetry()!;
  const track = async (results: Promise<Appended | Appended[]>): Promise<Appended | Appended[]> => {
    try {
      const settled = await results;
      if (!Array.isArray(settled)) {
        span.setAttributes({ [ATTR.messageId]: settled.id, [ATTR.partition]: String(settled.partition), [ATTR.offset]: settled.offset });
      }
      return settled;
    } catch (error) {
      // The publisher's own errors: plain to read.
      span.recordException(isError(error) ? error : describeError(error));
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: describeError(error) });
      throw error;
    } finally {
      span.end();
    }
  };
  return { input, track: track as PublishSpan<T>['track'] };
}

function producerAttributes(config: PublishTracingConfig, destination: string): Record<string, string> {
  return {
    [ATTR.system]: MESSAGING_SYSTEM,
    [ATTR.operationType]: 'send',
    [ATTR.operationName]: 'publish',
    [ATTR.destination]: destination,
    [ATTR.prefix]: config.prefix,
  };
}

/** The headers plus `traceparent` (and `tracestate`) of `span`, written by the app's propagator. */
function withTraceContext(span: Span, headers: Record<string, string> | undefined): Record<string, string> | undefined {
  const api = openTelemetry()!;
  const carrier: Record<string, string> = { ...headers };
  api.propagation.inject(api.trace.setSpan(api.context.active(), span), carrier);
  return Object.keys(carrier).length === 0 ? headers : carrier;
}

/** True, and a link added, when the headers already carry a trace context (a relayed event keeps its own). */
function linkTo(headers: Record<string, string> | undefined, links: Link[]): boolean {
  if (headers?.traceparent === undefined) return false;
  const api = openTelemetry()!;
  const context = api.trace.getSpanContext(api.propagation.extract(api.ROOT_CONTEXT, headers));
  if (context && api.trace.isSpanContextValid(context)) links.push({ context });
  return true;
}
