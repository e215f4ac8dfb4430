import type { OpenTelemetry } from './open-telemetry';

/**
 * The header a re-delivered event carries: the W3C `traceparent` of the
 * replay (or restore) span that appended it again. Its own `traceparent`
 * stays the original producer's, so the new attempts link to both.
 */
export const REPLAY_HEADER = 'replaytraceparent';

/** The span context a `traceparent` value names, if it is valid. */
export function producerContext(api: OpenTelemetry, traceparent: string | undefined): ReturnType<OpenTelemetry['trace']['getSpanContext']> {
  if (traceparent === undefined) return undefined;
  const context = api.trace.getSpanContext(api.propagation.extract(api.ROOT_CONTEXT, { traceparent }));
  return context && api.trace.isSpanContextValid(context) ? context : undefined;
}

export function parseHeaders(json: string | undefined): Record<string, string> {
  if (json === undefined) return {};
  try {
    const parsed: unknown = JSON.parse(json);
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, string>) : {};
  } catch {
    return {};
  }
}
