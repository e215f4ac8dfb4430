// OpenTelemetry for the sample: EVENTRAIL_SAMPLE_TRACING=console prints every span (the HTTP request's
// publish, each handler attempt, dead letters) to stdout. A real app would export over OTLP instead.
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { ConsoleSpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';

export function startSampleTracing(): void {
  if (process.env.EVENTRAIL_SAMPLE_TRACING !== 'console') return;
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(new ConsoleSpanExporter())] });
  provider.register({ propagator: new W3CTraceContextPropagator(), contextManager: new AsyncLocalStorageContextManager() });
}
