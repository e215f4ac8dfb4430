import type { Context, Link, Span } from '@opentelemetry/api';
import type { EventrailMessage } from '../events/eventrail-message';
import type { DeadLetterRecord } from '../wire/dead-letter.codec';
import { isMalformed } from '../wire/codec';
import { describeError, isError } from '../util/describe-error';
import { ATTR, eventrailTracer, liveOpenTelemetry, MESSAGING_SYSTEM, openTelemetry, type OpenTelemetry } from './open-telemetry';
import { parseHeaders, producerContext, REPLAY_HEADER } from './trace-headers';
import type { ResolvedTracingOptions } from './tracing.options';

/**
 * What tracing needs of a handler binding. Declared here, not imported from
 * the consumer, because the consumer imports tracing: the consumer's bindings
 * fit it as they are.
 */
export interface TracedHandler {
  /** `ClassName.method`, recorded as the span's `code.function.name`. */
  name: string;
  call: (message: EventrailMessage) => unknown;
}

/** Where given-up messages go (the consumer's dead-letter sink fits it). */
export interface DeadLetterSinkLike {
  accept(failed: DeadLetterRecord): Promise<void>;
}

export interface ProcessTracingConfig {
  prefix: string;
  tracing: ResolvedTracingOptions;
}

/**
 * The group's handlers, each attempt running in a CONSUMER span
 * `process <event>` that links to the producer's trace context from the
 * event's headers (or is its child with `tracing.parent`), and is the active
 * span while the handler runs, so the handler's own spans are its children.
 * The handlers as they are when tracing is off or OpenTelemetry is absent.
 */
export function traceHandlers<H extends TracedHandler>(
  config: ProcessTracingConfig,
  group: string,
  handlers: ReadonlyMap<string, readonly H[]>,
): ReadonlyMap<string, readonly H[]> {
  const api = config.tracing.enabled ? openTelemetry() : undefined;
  if (!api) return handlers;
  const traced = new Map<string, H[]>();
  for (const [event, bindings] of handlers) {
    traced.set(
      event,
      bindings.map((binding) => ({
        // The rest of the binding (a batch handler's `batch`, a typed event's `schema`) is kept as it is.
        ...binding,
        // Without a registered SDK at the time of the call, the handler runs as if untraced.
        call: (message: EventrailMessage) => {
          const live = liveOpenTelemetry(true);
          return live ? runTraced(live, config, group, binding, message) : binding.call(message);
        },
      })),
    );
  }
  return traced;
}

/**
 * The group's dead-letter sink, each given-up message recorded in a span
 * `dead-letter <event>` (placed like the attempts' spans) with an
 * `eventrail.dead_letter` event: why, after how many attempts, the error.
 */
export function traceDeadLetters(config: ProcessTracingConfig, sink: DeadLetterSinkLike): DeadLetterSinkLike {
  const api = config.tracing.enabled ? openTelemetry() : undefined;
  if (!api) return sink;
  return {
    accept: async (failed) => {
      if (!liveOpenTelemetry(true)) return sink.accept(failed);
      const { entry } = failed;
      const event = isMalformed(entry) ? '(malformed)' : entry.event;
      const headers = isMalformed(entry) ? {} : parseHeaders(entry.headers);
      const { parent, links } = placement(api, config, headers);
      const span = eventrailTracer(api).startSpan(
        `dead-letter ${event}`,
        {
          kind: api.SpanKind.CONSUMER,
          attributes: {
            ...consumerAttributes(config, failed.group, event, failed.partition, entry.offset),
            [ATTR.operationType]: 'settle',
            [ATTR.operationName]: 'dead-letter',
            ...(isMalformed(entry) ? {} : { [ATTR.messageId]: entry.id }),
          },
          links,
        },
        parent,
      );
      span.addEvent('eventrail.dead_letter', {
        'eventrail.reason': failed.reason,
        'eventrail.attempts': failed.attempts,
        'exception.message': describeError(failed.error),
      });
      try {
        await sink.accept(failed);
      } catch (error) {
        fail(api, span, error);
        throw error;
      } finally {
        span.end();
      }
    },
  };
}

function runTraced(
  api: OpenTelemetry,
  config: ProcessTracingConfig,
  group: string,
  binding: TracedHandler,
  message: EventrailMessage,
): unknown {
  const { parent, links } = placement(api, config, message.headers);
  // A dead-letter replay: linked to the replay's span as well as to the original producer's.
  const replay = producerContext(api, message.headers[REPLAY_HEADER]);
  if (replay) links.push({ context: replay });
  const span = eventrailTracer(api).startSpan(
    `process ${message.event}`,
    {
      kind: api.SpanKind.CONSUMER,
      attributes: {
        ...consumerAttributes(config, group, message.event, message.partition, message.offset),
        [ATTR.operationType]: 'process',
        [ATTR.operationName]: 'process',
        [ATTR.messageId]: message.id,
        [ATTR.attempt]: message.attempt,
        'code.function.name': binding.name,
        ...(message.key === null ? {} : { [ATTR.key]: message.key }),
      },
      links,
    },
    parent,
  );
  if (replay) span.addEvent('eventrail.replay');
  if (message.attempt > 1) span.addEvent('eventrail.retry', { [ATTR.attempt]: message.attempt });
  let result: unknown;
  try {
    result = api.context.with(api.trace.setSpan(parent, span), () => binding.call(message));
  } catch (error) {
    fail(api, span, error);
    span.end();
    throw error;
  }
  // A synchronous handler stays synchronous: the processor's fast path needs no promise for it.
  if (!isThenable(result)) {
    span.end();
    return result;
  }
  return Promise.resolve(result).then(
    (value) => {
      span.end();
      return value;
    },
    (error: unknown) => {
      fail(api, span, error);
      span.end();
      throw error;
    },
  );
}

/**
 * Where a consumer-side span goes: a child of the producer's context with
 * `tracing.parent`, else the root of a trace of its own (never whatever
 * context the consumer loop happens to carry), linked to the producer's.
 */
function placement(api: OpenTelemetry, config: ProcessTracingConfig, headers: Record<string, string>): { parent: Context; links: Link[] } {
  if (headers.traceparent === undefined) return { parent: api.ROOT_CONTEXT, links: [] };
  const producer = api.propagation.extract(api.ROOT_CONTEXT, headers);
  const context = api.trace.getSpanContext(producer);
  if (!context || !api.trace.isSpanContextValid(context)) return { parent: api.ROOT_CONTEXT, links: [] };
  return { parent: config.tracing.parent ? producer : api.ROOT_CONTEXT, links: [{ context }] };
}

function consumerAttributes(
  config: ProcessTracingConfig,
  group: string,
  event: string,
  partition: number,
  offset: string,
): Record<string, string> {
  return {
    [ATTR.system]: MESSAGING_SYSTEM,
    [ATTR.destination]: event,
    [ATTR.group]: group,
    [ATTR.partition]: String(partition),
    [ATTR.offset]: offset,
    [ATTR.prefix]: config.prefix,
  };
}

/** Marks the span failed. Never throws: an error whose fields throw when read must not change what the handler did. */
function fail(api: OpenTelemetry, span: Span, error: unknown): void {
  const message = describeError(error);
  try {
    span.recordException(isError(error) ? error : message);
  } catch {
    span.recordException(message);
  }
  span.setStatus({ code: api.SpanStatusCode.ERROR, message });
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}
