import type * as OpenTelemetryApi from '@opentelemetry/api';
import { requireOptionalPeer } from '../util/optional-peer';

export type OpenTelemetry = typeof OpenTelemetryApi;

let loaded: { api: OpenTelemetry | undefined } | undefined;

/**
 * `@opentelemetry/api`, required on first use (the first publish or handler
 * wrap with tracing on), never when the library is loaded; undefined when it
 * is not installed. Without an SDK registered in the app, its tracer makes
 * spans that record nothing and its propagator writes no headers.
 */
export function openTelemetry(): OpenTelemetry | undefined {
  // A synchronous require, on first use: publish must not wait for an import, and the main entry must not load it.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  loaded ??= { api: requireOptionalPeer(() => require('@opentelemetry/api') as OpenTelemetry) };
  return loaded.api;
}

/**
 * `@opentelemetry/api` when it is installed and an SDK (a tracer provider)
 * is registered, else undefined. Without an SDK every span would be a no-op
 * and no header would be written: skipping the work keeps `publish` and the
 * handler call as they are without tracing. Asked on every call, which is a
 * type check and a lookup: an app may register its SDK after startup.
 */
export function liveOpenTelemetry(enabled: boolean): OpenTelemetry | undefined {
  const api = enabled ? openTelemetry() : undefined;
  if (!api) return undefined;
  const provider = api.trace.getTracerProvider();
  if (provider instanceof api.ProxyTracerProvider && provider.getDelegateTracer(TRACER_NAME) === undefined) return undefined;
  return api;
}

const TRACER_NAME = 'nestjs-eventrail';

/** The tracer every eventrail span comes from (the instrumentation scope). */
export function eventrailTracer(api: OpenTelemetry): OpenTelemetryApi.Tracer {
  return api.trace.getTracer(TRACER_NAME);
}

/** Attribute names from the OpenTelemetry messaging semantic conventions, and eventrail's own under `messaging.eventrail.*`. */
export const ATTR = {
  system: 'messaging.system',
  operationType: 'messaging.operation.type',
  operationName: 'messaging.operation.name',
  destination: 'messaging.destination.name',
  partition: 'messaging.destination.partition.id',
  group: 'messaging.consumer.group.name',
  messageId: 'messaging.message.id',
  batchCount: 'messaging.batch.message_count',
  offset: 'messaging.eventrail.offset',
  attempt: 'messaging.eventrail.attempt',
  key: 'messaging.eventrail.key',
  prefix: 'messaging.eventrail.prefix',
} as const;

/** `messaging.system` of every span: a system the conventions do not list goes by its own name. */
export const MESSAGING_SYSTEM = 'eventrail';
