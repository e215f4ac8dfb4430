import { checkBoolean, checkObject, optionNames, rejectUnknownKeys } from '../config/option-checks';

/**
 * OpenTelemetry spans around publishing and handling. Used only when
 * `@opentelemetry/api` is installed (an optional peer); without it nothing is
 * loaded and nothing changes.
 */
export interface TracingOptions {
  /**
   * Trace `publish` / `publishMany` (PRODUCER spans, W3C `traceparent` / `tracestate` written into the
   * event's headers) and every handler attempt (CONSUMER spans).
   * @default true
   */
  enabled?: boolean;
  /**
   * Make each handler attempt's span a child of the producer's span (one trace from the request that
   * published to the handler), instead of the root of a trace of its own that links to it.
   * @default false
   */
  parent?: boolean;
}

export type ResolvedTracingOptions = Required<TracingOptions>;

export const TRACING_DEFAULTS: ResolvedTracingOptions = Object.freeze({ enabled: true, parent: false });

export const TRACING_OPTION_NAMES = optionNames<TracingOptions>()(['enabled', 'parent']);

export function resolveTracingOptions(options: TracingOptions | undefined): ResolvedTracingOptions {
  if (options === undefined) return TRACING_DEFAULTS;
  checkObject('tracing', options, 'an object: { enabled?, parent? }');
  rejectUnknownKeys('tracing', options, TRACING_OPTION_NAMES);
  return {
    enabled: checkBoolean('tracing.enabled', options.enabled ?? TRACING_DEFAULTS.enabled),
    parent: checkBoolean('tracing.parent', options.parent ?? TRACING_DEFAULTS.parent),
  };
}
